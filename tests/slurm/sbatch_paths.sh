#!/bin/sh
# sbatch_paths.sh - slurm/train.sbatch's own logic, with srun and scontrol
# replaced by stubs on PATH (no SLURM needed; tests/slurm/slurm_e2e.sh runs the
# script on a real cluster): a warning forwarded as ftrain's stop signal,
# then a requeue; ftrain told which stop signal to use, and a mismatch with
# FTRAIN_ARGS refused; a warning while the script is still setting up does
# not kill it; a warning that srun drops is sent again; FTRAIN_PROGRAM runs
# another program with the contract's environment and none of ftrain's
# options, and its exit 75 requeues; the default ftrain is the submit
# directory's build, else the one on PATH.
. "$(dirname "$0")/../lib.sh"
command -v bash >/dev/null 2>&1 || skip_all "bash not installed"
SCRIPT=${SBATCH_SCRIPT:-$(cd "$(dirname "$0")/../.." && pwd)/slurm/train.sbatch}
# The script execs ftrain-supervise: this tree's unless FTRAIN_SUPERVISE says.
case $BUILD in /*) sup=$BUILD ;; *) sup=$(cd "$(dirname "$0")/../.." && pwd)/$BUILD ;; esac
export FTRAIN_SUPERVISE=${FTRAIN_SUPERVISE:-$sup/ftrain-supervise}
[ -x "$FTRAIN_SUPERVISE" ] || { echo "Bail out! $FTRAIN_SUPERVISE is not built (make)"; exit 1; }
B="$T/bin"
mkdir -p "$B"
LOG="$T/stub.log"
export LOG

# srun stub (also mpirun's): records its arguments once its traps are set,
# then waits; the Nth stop signal (N = SRUN_DROP + 1) makes it exit 75 as
# ftrain does after a checkpoint.  SRUN_INIT=S: it records its arguments
# first and sets its traps S seconds later, as a launcher that is still
# starting up.  SRUN_RUN=1: it runs the command after its own options
# instead, as one task (exec: signals reach the command).  The node-local
# tier's removal step (rm -rf -- DIR) is only recorded.
cat >"$B/srun" <<'EOF'
#!/bin/sh
case " $* " in *" rm -rf -- "*)
	echo "${0##*/} $*" >>"$LOG"
	exit 0 ;;
esac
if [ -n "${SRUN_RUN:-}" ]; then
	echo "${0##*/} $*" >>"$LOG"
	while [ $# -gt 0 ]; do
		case $1 in
		--mca) shift 3 ;; # mpirun's options with values
		-x) shift 2 ;;
		-*) shift ;;
		*) break ;;
		esac
	done
	exec "$@"
fi
n=0
on_sig() {
	n=$((n + 1))
	echo "srun got $1 ($n)" >>"$LOG"
	[ "$n" -gt "${SRUN_DROP:-0}" ] && exit 75
}
if [ -n "${SRUN_INIT:-}" ]; then
	echo "srun $*" >>"$LOG"
	sleep "$SRUN_INIT"
fi
trap 'on_sig USR1' USR1
trap 'on_sig USR2' USR2
[ -n "${SRUN_INIT:-}" ] || echo "srun $*" >>"$LOG"
[ -n "${SRUN_EXIT:-}" ] && exit "$SRUN_EXIT"
i=0
while [ "$i" -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
exit 0
EOF
# scontrol stub: records the call; `show` answers nothing, after
# SHOW_DELAY seconds (a slow controller); a requeue ends the batch shell as
# a real one does (SCONTROL_FAIL=1: fails instead, as a busy controller
# may).
cat >"$B/scontrol" <<'EOF'
#!/bin/sh
echo "scontrol $*" >>"$LOG"
[ "$1" = show ] && sleep "${SHOW_DELAY:-0}" && exit 0
[ -n "${SCONTROL_FAIL:-}" ] && exit 1
kill -TERM "$PPID"
exit 0
EOF
cp "$B/srun" "$B/mpirun"
chmod +x "$B/srun" "$B/mpirun" "$B/scontrol"
printf '#!/bin/sh\nexit 0\n' >"$T/ftrain"
chmod +x "$T/ftrain"
# A program that follows the contract: records its arguments and the
# contract's variables, and on its stop signal "checkpoints" and exits 75.
cat >"$T/prog" <<'EOF'
#!/bin/sh
echo "prog args: $*" >>"$LOG"
echo "prog env: FTRAIN_RUN_DIR=${FTRAIN_RUN_DIR:-unset} FTRAIN_STOP_SIGNAL=${FTRAIN_STOP_SIGNAL:-unset}" >>"$LOG"
trap 'echo "prog got USR1" >>"$LOG"; exit 75' USR1
trap 'echo "prog got USR2" >>"$LOG"; exit 75' USR2
i=0
while [ "$i" -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
exit 0
EOF
chmod +x "$T/prog"

# run_script VAR=VALUE...: start the batch script in the background with the
# stubs first on PATH; its output goes to $T/out, its pid to SPID, the
# stubs' lines to $LOG ($T/stub.log).  (A case of bg_case below: to its
# own files, CASE_OUT and CASE_LOG.)
run_script() {
	LOG=${CASE_LOG:-$T/stub.log} OUT=${CASE_OUT:-$T/out}
	: >"$LOG"
	env PATH="$B:$PATH" SLURM_JOB_ID=4242 SLURM_SUBMIT_DIR="$T" FTRAIN="$T/ftrain" \
		RUN_DIR="$T/run" "$@" bash "$SCRIPT" --data line >"$OUT" 2>&1 &
	SPID=$!
	track_bg "$SPID"
}
srun_started() { grep -q '^srun ' "$LOG"; }
prog_started() { grep -q '^prog env' "$LOG"; }
logged() { grep -q "$1" "$LOG"; }

# The cases that start the script, send it USR1 once srun has started and
# wait for its end (most of them wait out the script's 2-s grace for a new
# launcher; one its resend of the signal 10 s later, one its requeue tries
# 5 s apart) run in the background from the start, side by side, each with
# its own stub log, output and RUN_DIR ($T/NAME.*, $T/run-NAME); their
# checks come in their place below (as_case NAME: read them there).
bg_case() { # NAME VAR=VALUE...: the case's script, then its USR1s; exit status in $T/NAME.rc
	_n=$1
	shift
	(
		CASE_LOG=$T/$_n.log CASE_OUT=$T/$_n.out
		run_script RUN_DIR="$T/run-$_n" "$@"
		wait_for 10 srun_started
		kill -USR1 "$SPID"
		if [ "$_n" = requeue-retry ]; then
			wait_for 10 logged 'scontrol requeue'
			kill -USR1 "$SPID" 2>/dev/null
		fi
		{ wait "$SPID"; } 2>/dev/null
		echo "$?" >"$T/$_n.rc"
	) &
	track_bg "$!"
	eval "bgc_$(echo "$_n" | tr - _)=\$!"
}
as_case() { # NAME: wait for bg_case NAME; LOG and T/out become its own, rc its status
	eval "wait \"\$bgc_$(echo "$1" | tr - _)\""
	LOG=$T/$1.log
	cp "$T/$1.out" "$T/out"
	rc=$(cat "$T/$1.rc" 2>/dev/null || echo 255)
}
mkdir -p "$T/tree/build" "$T/elsewhere" "$T/pathbin"
cp "$T/ftrain" "$T/tree/build/ftrain"
cp "$T/ftrain" "$T/pathbin/ftrain"
bg_case srun-drop SRUN_DROP=1
bg_case requeue-retry SCONTROL_FAIL=1
bg_case usr1
bg_case usr2 FTRAIN_STOP_SIGNAL=USR2
bg_case sigusr2 FTRAIN_STOP_SIGNAL=SIGUSR2
bg_case srun-init SRUN_INIT=1
bg_case array SLURM_ARRAY_JOB_ID=4000 SLURM_ARRAY_TASK_ID=3
bg_case local-root FTRAIN_ARGS="--ckpt-local-every 2" FTRAIN_LOCAL_ROOT="$T/local-root/"
bg_case ftrain-build FTRAIN= SLURM_SUBMIT_DIR="$T/tree" PATH="$T/pathbin:$B:$PATH"
bg_case ftrain-path FTRAIN= SLURM_SUBMIT_DIR="$T/elsewhere" PATH="$T/pathbin:$B:$PATH"

# ---- USR1: forwarded, ftrain exits 75, the job is requeued ---------------
as_case usr1
like "$(cat "$LOG")" "srun got USR1" "USR1 to the batch shell is forwarded to srun as USR1"
like "$(cat "$LOG")" "scontrol requeue 4242" "  after ftrain's exit 75 the job is requeued"
is "$rc" 143 "  and the requeue's TERM ends the shell"
like "$(grep '^srun ' "$LOG")" "--stop-signal USR1" "ftrain is told its stop signal (--stop-signal USR1)"
like "$(grep '^srun ' "$LOG")" "--kill-on-bad-exit=1" "srun ends the step when a rank dies (--kill-on-bad-exit=1)"

# ---- FTRAIN_STOP_SIGNAL=USR2: ftrain gets --stop-signal USR2 ---------------
as_case usr2
like "$(cat "$LOG")" "srun got USR2" "FTRAIN_STOP_SIGNAL=USR2: the warning is forwarded as USR2"
like "$(grep '^srun ' "$LOG")" "--stop-signal USR2" "  and ftrain is told --stop-signal USR2"

# ---- a mismatch between FTRAIN_ARGS and FTRAIN_STOP_SIGNAL ----------------
run_script FTRAIN_ARGS="--stop-signal USR2"
{ wait "$SPID"; } 2>/dev/null
rc=$?
is "$rc" 2 "--stop-signal USR2 in FTRAIN_ARGS with FTRAIN_STOP_SIGNAL unset: refused (exit 2)"
like "$(cat "$T/out")" "given --stop-signal USR2 but FTRAIN_STOP_SIGNAL is USR1" "  saying why"
ok "$(! srun_started; echo $?)" "  nothing launched"

# ---- the SIG prefix names the same signal, as for ftrain -----------------
run_script FTRAIN_ARGS="--stop-signal SIGUSR1"
wait_for 10 srun_started
ok "$?" "--stop-signal SIGUSR1 in FTRAIN_ARGS with FTRAIN_STOP_SIGNAL unset: accepted, launched"
kill -USR1 "$SPID" 2>/dev/null
{ wait "$SPID"; } 2>/dev/null
is "$(grep '^srun ' "$LOG" | grep -o -- '--stop-signal' | wc -l | tr -d ' ')" 1 "  and passed once"
as_case sigusr2
like "$(cat "$LOG")" "srun got USR2" "FTRAIN_STOP_SIGNAL=SIGUSR2: the warning is forwarded as USR2"

# ---- a warning while the script is still setting up ---------------------
# The set-up is slow: array variables of another id make it ask SLURM
# whether they are this job's (inherited from the task that submitted it),
# and the controller takes 2 s to answer.
SLOW_SETUP="SHOW_DELAY=2 SLURM_ARRAY_JOB_ID=4000 SLURM_ARRAY_TASK_ID=3"
# shellcheck disable=SC2086
run_script $SLOW_SETUP
sleep 0.5
kill -USR1 "$SPID"
{ wait "$SPID"; } 2>/dev/null
rc=$?
like "$(cat "$T/out")" "got USR1 before the launcher ran" "USR1 during a slow set-up: the shell survives it"
like "$(cat "$T/out")" "stop requested before launch; not starting ftrain" "  starts nothing"
ok "$(logged 'scontrol requeue 4242'; echo $?)" "  and requeues (exit $rc)"

# ---- a warning that srun drops is sent again --------------------------
as_case srun-drop
like "$(cat "$LOG")" "srun got USR1 \\(2\\)" "a stop signal srun dropped is forwarded again (10 s later)"
ok "$(logged 'scontrol requeue 4242'; echo $?)" "  and the job is then requeued"

# ---- a warning right as the launcher starts -------------------------------
# srun takes 1 s to set its handlers: a stop signal then would kill it (exit
# 138, no checkpoint, no requeue).  The script waits until the launcher is
# 2 s old before its first send.
as_case srun-init
like "$(cat "$T/out")" "has just started; forwarding USR1 in [01]\\.[0-9]{3} s" \
    "a warning as the launcher starts: forwarded 2 s later"
ok "$(logged 'srun got USR1' && logged 'scontrol requeue 4242'; echo $?)" \
    "  the launcher took it and the job is requeued (exit $rc)" || why "$(cat "$T/out")"

# ---- TERM while the script is still setting up ---------------------------
# shellcheck disable=SC2086
run_script $SLOW_SETUP
sleep 0.5
kill -TERM "$SPID"
{ wait "$SPID"; } 2>/dev/null
rc=$?
like "$(cat "$T/out")" "TERM before launch; not starting ftrain" "TERM during set-up: nothing is launched"
ok "$([ "$rc" -eq 143 ] && ! srun_started && ! logged 'scontrol requeue'; echo $?)" \
    "  nor requeued (exit $rc)"

# ---- a stop signal while the requeue is retried -------------------------
as_case requeue-retry
ok "$([ "$rc" -eq 75 ] && [ "$(grep -c '^scontrol requeue' "$LOG")" -eq 3 ]; echo $?)" \
    "a stop signal between requeue tries is ignored: 3 tries, then exit 75 (exit $rc)" ||
    why "$(cat "$LOG")"
like "$(cat "$T/out")" "scontrol requeue 4242 failed; resubmit by hand" "  saying the requeue failed"

# ---- array variables inherited from a submitting array task -----------------
as_case array
ok "$(logged 'scontrol requeue 4242$'; echo $?)" \
    "the requeue names SLURM_JOB_ID, never an array id that may be inherited" || why "$(cat "$LOG")"

# ---- numbers in the environment -------------------------------------------
for bad in FTRAIN_TASKS_PER_NODE=abc FTRAIN_TASKS_PER_NODE=0 FTRAIN_KILL_TIMEOUT=soon \
    FTRAIN_MAX_RESTARTS=99999999999999999999 FTRAIN_MAX_RELAUNCHES=many FTRAIN_MIN_NODES=0 \
    FTRAIN_RELAUNCH_NEED=-5; do
    run_script "$bad"
    { wait "$SPID"; } 2>/dev/null
    rc=$?
    ok "$([ "$rc" -eq 2 ] && ! srun_started && grep -q "error: ${bad%%=*} must be" "$T/out"; echo $?)" \
        "$bad: refused (exit $rc), nothing launched" || why "$(cat "$T/out")"
done

# ---- the node-local tier's directory -------------------------------------------
run_script FTRAIN_ARGS="--ckpt-local-every 2" FTRAIN_LOCAL_ROOT=relative/dir
{ wait "$SPID"; } 2>/dev/null
rc=$?
ok "$([ "$rc" -eq 2 ] && ! srun_started && grep -q "error: FTRAIN_LOCAL_ROOT must be an absolute path, got 'relative/dir'" "$T/out"; echo $?)" \
    "FTRAIN_LOCAL_ROOT=relative/dir: refused (exit $rc), nothing launched" || why "$(cat "$T/out")"
as_case local-root
like "$(grep '^srun ' "$LOG" | head -n 1)" "--ckpt-local $T/local-root/ftrain-job-4242/%n --ckpt-local-remove-at-end" \
    "local checkpoints asked for: ftrain gets --ckpt-local FTRAIN_LOCAL_ROOT/ftrain-job-<job id>/%n, removed by ftrain at a good end"
run_script FTRAIN_ARGS="--ckpt-local-every 2" FTRAIN_LOCAL_ROOT="$T/local%n"
{ wait "$SPID"; } 2>/dev/null
rc=$?
ok "$([ "$rc" -eq 2 ] && ! srun_started && grep -q "error: FTRAIN_LOCAL_ROOT must not hold '%'" "$T/out"; echo $?)" \
    "FTRAIN_LOCAL_ROOT with a '%': refused (exit $rc), nothing launched" || why "$(cat "$T/out")"
run_script FTRAIN_SLURM_TIMEOUT=0
{ wait "$SPID"; } 2>/dev/null
rc=$?
ok "$([ "$rc" -eq 2 ] && ! srun_started && grep -q "error: FTRAIN_SLURM_TIMEOUT must be" "$T/out"; echo $?)" \
    "FTRAIN_SLURM_TIMEOUT=0: refused (exit $rc), nothing launched" || why "$(cat "$T/out")"
run_script FTRAIN_REQUEUE_EXCLUDE=yes
{ wait "$SPID"; } 2>/dev/null
rc=$?
ok "$([ "$rc" -eq 2 ] && ! srun_started && grep -q "error: FTRAIN_REQUEUE_EXCLUDE must be 0 or 1, got 'yes'" "$T/out"; echo $?)" \
    "FTRAIN_REQUEUE_EXCLUDE=yes: refused (exit $rc), nothing launched" || why "$(cat "$T/out")"

# ---- a failure that is the user's: not relaunched ---------------------------
# (Relaunches themselves need a real cluster: tests/slurm/slurm_relaunch.sh.)
run_script SRUN_EXIT=1
{ wait "$SPID"; } 2>/dev/null
rc=$?
ok "$([ "$rc" -eq 1 ] && [ "$(grep -c '^srun ' "$LOG")" -eq 1 ]; echo $?)" \
    "a launch that fails with status 1 and no lost rank, node or hang: one launch, exit $rc" ||
    why "$(cat "$LOG" "$T/out")"
like "$(cat "$T/out")" "not a lost rank, node or hang .*; not relaunching" "  saying why it is not relaunched"

# ---- FTRAIN_PROGRAM: another program under the same contract ----------------
# FTRAIN names nothing: the program does not need ftrain.
run_script SRUN_RUN=1 FTRAIN="$T/no-such-ftrain" FTRAIN_PROGRAM="$T/prog --lr 3"
wait_for 10 prog_started
kill -USR1 "$SPID"
{ wait "$SPID"; } 2>/dev/null
rc=$?
is "$(sed -n 's/^prog args: //p' "$LOG")" "--lr 3 --data line" \
    "FTRAIN_PROGRAM: the program gets its own arguments and the script's, none of ftrain's options"
is "$(sed -n 's/^prog env: //p' "$LOG")" "FTRAIN_RUN_DIR=$T/run FTRAIN_STOP_SIGNAL=USR1" \
    "  and FTRAIN_RUN_DIR and FTRAIN_STOP_SIGNAL in its environment"
like "$(grep '^srun ' "$LOG")" "^srun --overlap --mpi=pmix --kill-on-bad-exit=1 $T/prog --lr 3 --data line\$" \
    "  launched by srun as ftrain is"
ok "$(logged 'prog got USR1' && logged 'scontrol requeue 4242' && [ "$rc" -eq 143 ]; echo $?)" \
    "  the warning reaches it, its exit 75 requeues the job (exit $rc)" || why "$(cat "$LOG" "$T/out")"
like "$(cat "$T/out")" "prog exited with status 75" "  and the log names it"

run_script SRUN_RUN=1 FTRAIN_LAUNCH=mpirun FTRAIN_STOP_SIGNAL=SIGUSR2 FTRAIN_PROGRAM="$T/prog"
wait_for 10 prog_started
kill -USR1 "$SPID"
{ wait "$SPID"; } 2>/dev/null
like "$(grep '^mpirun ' "$LOG")" "-x FTRAIN_RUN_DIR -x FTRAIN_STOP_SIGNAL .*$T/prog --data line\$" \
    "FTRAIN_PROGRAM under mpirun: mpirun is told to pass the two variables on"
ok "$(logged 'FTRAIN_STOP_SIGNAL=USR2$' && logged 'prog got USR2'; echo $?)" \
    "  FTRAIN_STOP_SIGNAL=SIGUSR2 reaches it as USR2, and so does the warning" || why "$(cat "$LOG")"

# Bad settings: refused before anything is launched.
refused() { # refused WANT NAME: exit 2, nothing launched, the error WANT
    { wait "$SPID"; } 2>/dev/null
    _rc=$?
    ok "$([ "$_rc" -eq 2 ] && ! srun_started && grep -q "error: $1" "$T/out"; echo $?)" \
        "$2: refused (exit $_rc), saying why, nothing launched" || why "$(cat "$T/out")"
}
run_script FTRAIN_PROGRAM="$T/prog" FTRAIN_ARGS="--epochs 3"
refused "FTRAIN_ARGS holds ftrain's options" "FTRAIN_PROGRAM with FTRAIN_ARGS"
run_script FTRAIN_PROGRAM="$T/no-such-program"
refused "FTRAIN_PROGRAM's command '$T/no-such-program' is not found" "FTRAIN_PROGRAM naming no program"
run_script FTRAIN_PROGRAM="   "
refused "FTRAIN_PROGRAM is blank" "a blank FTRAIN_PROGRAM"

# ---- the default ftrain ---------------------------------------------------------
as_case ftrain-build
like "$(grep '^srun ' "$LOG")" " $T/tree/build/ftrain --run-dir" \
    "FTRAIN unset: the submit directory's build/ftrain first"
as_case ftrain-path
like "$(grep '^srun ' "$LOG")" " $T/pathbin/ftrain --run-dir" \
    "  without one (and no installed ftrain), the ftrain on PATH"
run_script FTRAIN= SLURM_SUBMIT_DIR="$T/elsewhere" PATH="$B:/usr/bin:/bin"
refused "ftrain binary '$T/elsewhere/build/ftrain' is missing or not executable (set FTRAIN; none in $T/elsewhere/build, none on PATH)" \
    "  none anywhere"

done_testing

#!/bin/sh
# sbatch_paths.sh - slurm/train.sbatch's own logic, with srun and scontrol
# replaced by stubs on PATH (no SLURM needed; tests/slurm_e2e.sh runs the
# script on a real cluster): a warning forwarded as ftrain's stop signal,
# then a requeue; ftrain told which stop signal to use, and a mismatch with
# FTRAIN_ARGS refused; a warning while the script is still setting up does
# not kill it; a warning that srun drops is sent again.
. "$(dirname "$0")/lib.sh"
command -v bash >/dev/null 2>&1 || skip_all "bash not installed"
SCRIPT="$(cd "$(dirname "$0")/.." && pwd)/slurm/train.sbatch"
B="$T/bin"
mkdir -p "$B"
LOG="$T/stub.log"
export LOG

# srun stub: records its arguments, then waits; the Nth stop signal (N =
# SRUN_DROP + 1) makes it exit 75 as ftrain does after a checkpoint.
cat >"$B/srun" <<'EOF'
#!/bin/sh
echo "srun $*" >>"$LOG"
n=0
on_sig() {
	n=$((n + 1))
	echo "srun got $1 ($n)" >>"$LOG"
	[ "$n" -gt "${SRUN_DROP:-0}" ] && exit 75
}
trap 'on_sig USR1' USR1
trap 'on_sig USR2' USR2
i=0
while [ "$i" -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
exit 0
EOF
# scontrol stub: records the call and ends the batch shell as a requeue does.
cat >"$B/scontrol" <<'EOF'
#!/bin/sh
echo "scontrol $*" >>"$LOG"
kill -TERM "$PPID"
exit 0
EOF
# mkdir stub: a slow shared file system (MKDIR_DELAY seconds).
cat >"$B/mkdir" <<'EOF'
#!/bin/sh
sleep "${MKDIR_DELAY:-0}"
exec /bin/mkdir "$@"
EOF
chmod +x "$B/srun" "$B/scontrol" "$B/mkdir"
printf '#!/bin/sh\nexit 0\n' >"$T/ftrain"
chmod +x "$T/ftrain"

# run_script VAR=VALUE...: start the batch script in the background with the
# stubs first on PATH; its output goes to $T/out, its pid to SPID.
run_script() {
	: >"$LOG"
	env PATH="$B:$PATH" SLURM_JOB_ID=4242 SLURM_SUBMIT_DIR="$T" FTRAIN="$T/ftrain" \
		RUN_DIR="$T/run" "$@" bash "$SCRIPT" --data line >"$T/out" 2>&1 &
	SPID=$!
}
srun_started() { grep -q '^srun ' "$LOG"; }
logged() { grep -q "$1" "$LOG"; }

# ---- USR1: forwarded, ftrain exits 75, the job is requeued ---------------
run_script
wait_for 10 srun_started
kill -USR1 "$SPID"
{ wait "$SPID"; } 2>/dev/null
rc=$?
like "$(cat "$LOG")" "srun got USR1" "USR1 to the batch shell is forwarded to srun as USR1"
like "$(cat "$LOG")" "scontrol requeue 4242" "  after ftrain's exit 75 the job is requeued"
is "$rc" 143 "  and the requeue's TERM ends the shell"
like "$(grep '^srun ' "$LOG")" "--stop-signal USR1" "ftrain is told its stop signal (--stop-signal USR1)"

# ---- FTRAIN_STOP_SIGNAL=USR2: ftrain gets --stop-signal USR2 ---------------
run_script FTRAIN_STOP_SIGNAL=USR2
wait_for 10 srun_started
kill -USR1 "$SPID"
{ wait "$SPID"; } 2>/dev/null
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
run_script FTRAIN_STOP_SIGNAL=SIGUSR2
wait_for 10 srun_started
kill -USR1 "$SPID"
{ wait "$SPID"; } 2>/dev/null
like "$(cat "$LOG")" "srun got USR2" "FTRAIN_STOP_SIGNAL=SIGUSR2: the warning is forwarded as USR2"

# ---- a warning while the script is still setting up ---------------------
run_script MKDIR_DELAY=2
sleep 0.5
kill -USR1 "$SPID"
{ wait "$SPID"; } 2>/dev/null
rc=$?
like "$(cat "$T/out")" "got USR1 before the launcher ran" "USR1 during a slow set-up: the shell survives it"
like "$(cat "$T/out")" "stop requested before launch; not starting ftrain" "  starts nothing"
ok "$(logged 'scontrol requeue 4242'; echo $?)" "  and requeues (exit $rc)"

# ---- a warning that srun drops is sent again --------------------------
run_script SRUN_DROP=1
wait_for 10 srun_started
kill -USR1 "$SPID"
{ wait "$SPID"; } 2>/dev/null
like "$(cat "$LOG")" "srun got USR1 \\(2\\)" "a stop signal srun dropped is forwarded again (10 s later)"
ok "$(logged 'scontrol requeue 4242'; echo $?)" "  and the job is then requeued"

done_testing

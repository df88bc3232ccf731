#!/bin/sh
# launch_retry.sh - tests/launch.sh, the launcher of every mpi/mpi_bg run of
# tests/lib.sh: a launch that Open MPI's start-up failed inside MPI_Init is
# launched again, said on stderr and in FTRAIN_TEST_LOGS/launch-retries;
# anything else is left as it was.
#
# A stand-in COMMAND (a shell script) plays mpirun: it counts its launches
# in a file and, on the ones chosen, prints what Open MPI prints when a
# rank's PMIx_Init fails, and exits 1.
#  1. stderr a regular file: the first launch fails so, the second
#     succeeds: exit 0, two launches, the retry said on stderr and logged
#     with the test's name.
#  2. stderr and stdout one pipe: the same, the output copied out in order.
#  3. every launch fails so: 3 launches (FTRAIN_LAUNCH_TRIES), the last's
#     exit status; FTRAIN_LAUNCH_TRIES=1: one launch.
#  4. not launched again: a non-zero exit without Open MPI's text (75), the
#     text written to stderr before this launch began, exit 0 with the text,
#     a launch that ended by a signal (KILL: 137), and a TERM to the process
#     group (what timeout(1) sends) while the failing launch runs; such a
#     TERM leaves launch.sh waiting for the launch's own end (its exit 75).
#  5. bad use: no COMMAND, FTRAIN_LAUNCH_TRIES not a positive number: exit
#     2 and a message.
#  6. through lib.sh: mpi runs ftrain through the launcher (a stand-in
#     mpirun first in PATH fails its first launch, then runs the real one):
#     the run succeeds after one retry; mpirun_of finds the mpirun of an
#     mpi_bg run below timeout(1) and launch.sh.
. "$(dirname "$0")/../lib.sh"

L=$LAUNCH
LOGD=$T/logs
mkdir -p "$LOGD"
# fake FAILS: a stand-in mpirun; FAILS lists the launches (1-based) that
# fail in MPI_Init; counts its launches in $T/count.
cat >"$T/fake" <<'EOF'
#!/bin/sh
n=$(($(cat "$COUNT" 2>/dev/null || echo 0) + 1))
echo "$n" >"$COUNT"
case " $FAILS " in
*" $n "*)
    echo "[vm:1234] OPAL ERROR: Unreachable in file ext3x_client.c at line 112" >&2
    echo "*** An error occurred in MPI_Init_thread" >&2
    echo "*** on a NULL communicator" >&2
    [ -z "${HOLD:-}" ] || sleep "$HOLD"
    exit 1 ;;
esac
echo "launch $n ran"
exit "${RC:-0}"
EOF
chmod +x "$T/fake"
export COUNT="$T/count"
count() { cat "$COUNT" 2>/dev/null || echo 0; }
launch() { rm -f "$COUNT"; FTRAIN_TEST_LOGS=$LOGD sh "$L" "$@"; }

# ---- 1. stderr a regular file ---------------------------------------------------
rm -f "$LOGD/launch-retries"
FAILS=1 launch "$T/fake" >"$T/o1" 2>"$T/e1"
rc=$?
is "$rc $(count)" "0 2" "1. a launch failed inside MPI_Init is launched again: exit 0 after 2 launches"
is "$(cat "$T/o1")" "launch 2 ran" "1. stdout holds the second launch's output"
like "$(cat "$T/e1")" "launch.sh: launch 1 of at most 3 failed inside MPI_Init, in Open MPI's start-up \(exit 1: \[vm:1234\] OPAL ERROR: Unreachable in file ext3x_client.c at line 112\); launching again" \
    "1. the retry is said on stderr, with Open MPI's error"
like "$(cat "$LOGD/launch-retries" 2>/dev/null)" "^[0-9:]{8} launch_retry.sh: launch 1 of 3: \[vm:1234\] OPAL ERROR" \
    "1. and logged in FTRAIN_TEST_LOGS/launch-retries with the test's name"

# ---- 2. stderr and stdout one pipe ---------------------------------------------
out=$(FAILS=1 launch "$T/fake" 2>&1)
rc=$?
is "$rc $(count)" "0 2" "2. through a pipe: exit 0 after 2 launches"
is "$(printf '%s\n' "$out" | grep -n -E 'An error occurred|launching again|ran$' | cut -d: -f1,2 | tr '\n' ' ')" \
    "2:*** An error occurred in MPI_Init_thread 4:launch.sh 5:launch 2 ran " \
    "2. the pipe gets both launches' output, in order, and the note" || why "$out"

# ---- 3. every launch fails ------------------------------------------------------
FAILS="1 2 3 4" launch "$T/fake" >"$T/o3" 2>"$T/e3"
rc=$?
is "$rc $(count) $(grep -c 'launching again' "$T/e3")" "1 3 2" \
    "3. every launch failing: 3 launches, 2 notes, the last launch's exit 1"
FAILS="1 2" FTRAIN_LAUNCH_TRIES=1 launch "$T/fake" >"$T/o3" 2>"$T/e3"
rc=$?
is "$rc $(count)" "1 1" "3. FTRAIN_LAUNCH_TRIES=1: one launch, its exit 1"

# ---- 4. not launched again ------------------------------------------------------
FAILS="" RC=75 launch "$T/fake" >"$T/o4" 2>"$T/e4"
rc=$?
is "$rc $(count)" "75 1" "4. a non-zero exit without Open MPI's text: one launch, its exit 75"
printf '%s\n' "*** An error occurred in MPI_Init_thread (an earlier launch's)" >"$T/e4"
FAILS="" RC=3 launch "$T/fake" >"$T/o4" 2>>"$T/e4"
rc=$?
is "$rc $(count)" "3 1" "4. the text in stderr from before this launch: one launch, its exit 3"
cat >"$T/fake0" <<'EOF'
#!/bin/sh
echo "*** An error occurred in MPI_Init_thread" >&2
n=$(($(cat "$COUNT" 2>/dev/null || echo 0) + 1)); echo "$n" >"$COUNT"
exit 0
EOF
launch sh "$T/fake0" >"$T/o4" 2>"$T/e4"
rc=$?
is "$rc $(count)" "0 1" "4. exit 0 with the text: one launch, exit 0"
cat >"$T/fake9" <<'EOF'
#!/bin/sh
echo "*** An error occurred in MPI_Init_thread" >&2
n=$(($(cat "$COUNT" 2>/dev/null || echo 0) + 1)); echo "$n" >"$COUNT"
kill -9 $$
EOF
launch sh "$T/fake9" >"$T/o4" 2>"$T/e4"
rc=$?
is "$rc $(count)" "137 3" "4. a launch killed (KILL) after the text: launched again; the status is 128+9"
# A TERM to the group while a failing launch holds (timeout(1) ends it so).
rm -f "$COUNT"
FAILS="1 2" HOLD=5 FTRAIN_TEST_LOGS=$LOGD timeout -s TERM 1 sh "$L" "$T/fake" >"$T/o4" 2>"$T/e4"
rc=$?
is "$rc $(count)" "124 1" "4. a TERM from timeout(1) during a failing launch: no second launch (timeout's 124)" ||
    why "$(cat "$T/e4")"

# A TERM to the group while a launch stops gracefully: launch.sh waits for
# it and ends with its status (75), not at once of the TERM (143), which
# would let timeout(1) and the test go on while mpirun still stops.
cat >"$T/faketerm" <<'EOF'
#!/bin/sh
trap 'sleep 1; echo stopped; exit 75' TERM
echo ready
sleep 30 &
wait
EOF
setsid sh "$L" sh "$T/faketerm" >"$T/o4" 2>"$T/e4" &
lpid=$!
wait_for 10 grep -q ready "$T/o4"
if [ "$(ps -o pgid= -p "$lpid" | tr -d ' ')" = "$lpid" ]; then
    kill -s TERM -- "-$lpid"
    wait "$lpid"
    rc=$?
    is "$rc $(tr '\n' ' ' <"$T/o4")" "75 ready stopped " \
        "4. a TERM to the group: launch.sh waits for the launch's own stop and ends with its exit 75"
else
    kill "$lpid" 2>/dev/null
    ok 1 "4. a TERM to the group: setsid did not make launch.sh a group leader (pgid $(ps -o pgid= -p "$lpid"))"
fi

# ---- 5. bad use -------------------------------------------------------------------
sh "$L" >"$T/o5" 2>"$T/e5"
rc=$?
is "$rc $(cat "$T/e5")" "2 usage: launch.sh COMMAND [ARG...]" "5. no COMMAND: exit 2 and the usage"
rm -f "$COUNT"
FTRAIN_LAUNCH_TRIES=x sh "$L" "$T/fake" >"$T/o5" 2>"$T/e5"
rc=$?
is "$rc $(count) $(cat "$T/e5")" "2 0 launch.sh: FTRAIN_LAUNCH_TRIES='x' is not a positive number" \
    "5. FTRAIN_LAUNCH_TRIES=x: exit 2, nothing launched, a message"

# ---- 6. through lib.sh ------------------------------------------------------------
if need_mpi_here=$(command -v mpirun) && [ -x "$FTRAIN" ]; then
    mkdir -p "$T/bin"
    cat >"$T/bin/mpirun" <<EOF
#!/bin/sh
n=\$((\$(cat "\$COUNT" 2>/dev/null || echo 0) + 1))
echo "\$n" >"\$COUNT"
if [ "\$n" = 1 ]; then
    echo "*** An error occurred in MPI_Init_thread" >&2
    exit 1
fi
exec "$need_mpi_here" "\$@"
EOF
    chmod +x "$T/bin/mpirun"
    rm -f "$COUNT"
    PATH="$T/bin:$PATH" FTRAIN_TEST_LOGS=$LOGD mpi 2 --data line --layers 8 --steps 3 >"$T/o6" 2>"$T/e6"
    rc=$?
    is "$rc $(count) $(grep -c '^done:' "$T/o6")" "0 2 1" "6. mpi: a failed first launch, then ftrain's run on 2 ranks, done" ||
        why "$(cat "$T/o6" "$T/e6")"
    rm -f "$COUNT"
    echo 1 >"$COUNT" # the stand-in runs the real mpirun at once
    PATH="$T/bin:$PATH" mpi_bg 1 --data line --layers 8 --steps 2000 --step-delay-ms 50 --run-dir "$T/r7" >"$T/o7" 2>"$T/e7"
    wait_for 30 progress_ge "$T/o7" 1
    mp=$(mpirun_of "$MPI_PID")
    is "$(cat "/proc/$mp/comm" 2>/dev/null) $(pgrep -P "$mp" -x ftrain | wc -l)" "mpirun 1" \
        "6. mpirun_of: the mpirun below timeout(1) and launch.sh, its one rank below it"
    kill -USR1 "$(rank_pid "$T/o7" 0)" 2>/dev/null
    wait "$MPI_PID"
    rc=$?
    MPI_PID=
    is "$rc" 75 "6. the mpi_bg run stopped by USR1 to its rank: its exit 75 through launch.sh and timeout(1)" ||
        why "$(cat "$T/o7" "$T/e7")"
else
    skip_n 3 "6. through lib.sh" "mpirun or $FTRAIN missing (need_mpi)"
fi
done_testing

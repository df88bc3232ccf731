#!/bin/sh
# runner.sh - tests/run.sh itself, on a scratch test directory
# (FTRAIN_TEST_DIR) and a scratch BUILD, with small test files that record
# when they start and end.
#
#  1. The schedule of tests/tiers.txt: the serial file runs beside the
#     parallel ones, both quiet files side by side once every parallel file
#     has ended, the alone file after them; the run passes.
#  2. The CPU list counts the CPU of a file's children: the file that
#     computes (about a CPU-second, in an awk it waits for) is listed with
#     at least 0.6 s, well above a file that only sleeps.
#  3. A run about to hit its timeout (lib.sh's mpi, FTRAIN_TIMEOUT=8, an
#     "ftrain" that sleeps) leaves its hang dump, which run.sh prints.
#  4. A launch that Open MPI failed inside MPI_Init (a stand-in mpirun) is
#     launched again by tests/launch.sh, and run.sh counts and names it.
#  5. The skip guard: a skip whose reason is not in skips-allowed.txt fails
#     the run, naming the test and the reason; an allowed one is listed; a
#     failing test fails the run.
#  6. The quick tier runs only the files tiers.txt names quick.
#  7. tiers.txt naming one file in two of serial, quiet and alone: exit 2,
#     naming the file and both kinds, nothing run.
. "$(dirname "$0")/../lib.sh"
command -v prove >/dev/null 2>&1 || skip_all "prove (perl) not installed"

RUN=$(pwd)/tests/run.sh
[ -f "$RUN" ] || RUN=$(cd "$(dirname "$0")/.." && pwd)/run.sh
export MARKS="$T/marks"

# scratch_td DIR: a test directory with lib.sh and launch.sh copied in (the
# test files there source them as tests/SUBJECT/NAME.sh do) and an empty
# skips list.
scratch_td() {
    mkdir -p "$1/a" "$1/b"
    cp "$LAUNCH" "$1/launch.sh"
    cp "$(dirname "$LAUNCH")/lib.sh" "$1/lib.sh"
    echo "any no GPU visible" >"$1/skips-allowed.txt"
}
# timed DIR NAME SECONDS: a test that marks its start and end around a sleep.
timed() {
    cat >"$1/$2" <<EOF
#!/bin/sh
echo "$2 start \$(date +%s.%N)" >>"\$MARKS"
sleep $3
echo "$2 end \$(date +%s.%N)" >>"\$MARKS"
echo 1..1
echo "ok 1 - $2"
EOF
    chmod +x "$1/$2"
}

# ---- the scratch directory of 1-4 ------------------------------------------
TD=$T/td
scratch_td "$TD"
timed "$TD/a" p1.sh 1
timed "$TD/a" p2.sh 1
timed "$TD/b" s1.sh 1
timed "$TD/b" q1.sh 2
timed "$TD/b" q2.sh 2
timed "$TD/b" al.sh 0.3
cat >"$TD/a/cpu.sh" <<'EOF'
#!/bin/sh
awk 'BEGIN { for (i = 0; i < 4e7; i++) s += i * 0.5; print "# " s }'
echo 1..1
echo "ok 1 - computed"
EOF
cat >"$TD/a/hang.sh" <<'EOF'
#!/bin/sh
. "$(dirname "$0")/../lib.sh"
FTRAIN_TIMEOUT=8
mpi 1 --steps 1 >"$T/out" 2>"$T/err"
is "$?" 124 "a run that hangs ends at its timeout"
done_testing
EOF
cat >"$TD/a/retry.sh" <<'EOF'
#!/bin/sh
. "$(dirname "$0")/../lib.sh"
mkdir -p "$T/bin"
cat >"$T/bin/mpirun" <<'XEOF'
#!/bin/sh
[ -f "$T/tried" ] && { echo "second launch"; exit 0; }
: >"$T/tried"
echo "[vm:1] OPAL ERROR: Unreachable in file ext3x_client.c at line 112" >&2
echo "*** An error occurred in MPI_Init_thread" >&2
exit 1
XEOF
chmod +x "$T/bin/mpirun"
export T
PATH="$T/bin:$PATH" mpi 1 --steps 1 >"$T/out" 2>"$T/err"
is "$? $(cat "$T/out")" "0 second launch" "launched again after a failure inside MPI_Init"
done_testing
EOF
chmod +x "$TD"/a/*.sh
cat >"$TD/tiers.txt" <<'EOF'
# scratch tiers
quick p1.sh
serial s1.sh
quiet q1.sh
quiet q2.sh
alone al.sh
EOF
B=$T/build
mkdir -p "$B"
printf '#!/bin/sh\nsleep 60\n' >"$B/ftrain"
chmod +x "$B/ftrain"

: >"$MARKS"
BUILD=$B FTRAIN_TEST_DIR=$TD FTRAIN_TEST_JOBS=3 sh "$RUN" full >"$T/run.out" 2>"$T/run.err"
rc=$?
is "$rc" 0 "the scratch suite passes (exit 0)" || why "$(cat "$T/run.out" "$T/run.err")"

# ---- 1. the schedule --------------------------------------------------------------
# at NAME start|end: the time NAME marked.
at() { awk -v n="$1" -v e="$2" '$1 == n && $2 == e { print $3 }' "$MARKS"; }
par_end=$(awk '$2 == "end" && $1 ~ /^p[0-9]/ { if ($3 > m) m = $3 } END { print m }' "$MARKS")
# The parallel part ends with hang.sh (8 s): its end is the log's time.
hang_end=$(stat -c %.3Y "$B/test-logs/hang.sh.ms" 2>/dev/null || echo 0)
ok "$(awk -v a="$(at s1.sh start)" -v b="$hang_end" 'BEGIN { exit !(a != "" && a < b) }'; echo $?)" \
    "1. the serial file started while the parallel ones ran (s1 at $(at s1.sh start), hang.sh ended $hang_end)"
q1s=$(at q1.sh start) q2s=$(at q2.sh start) q1e=$(at q1.sh end) q2e=$(at q2.sh end)
ok "$(awk -v a="$q1s" -v b="$q2s" -v p="$par_end" -v h="$hang_end" 'BEGIN { exit !(a != "" && b != "" && a > p && b > p && a > h - 0.5 && b > h - 0.5) }'; echo $?)" \
    "1. the quiet files started after every parallel file had ended" ||
    why "$(cat "$MARKS"; echo "hang.sh's log written at $hang_end")"
ok "$(awk -v a="$q1s" -v b="$q2s" -v c="$q1e" -v d="$q2e" 'BEGIN { exit !(a < d && b < c) }'; echo $?)" \
    "1. the two quiet files ran side by side (their times overlap)" || why "$(cat "$MARKS")"
ok "$(awk -v s="$(at al.sh start)" -v c="$q1e" -v d="$q2e" 'BEGIN { exit !(s != "" && s >= c && s >= d) }'; echo $?)" \
    "1. the alone file started after both quiet files had ended" || why "$(cat "$MARKS")"

# ---- 2. the CPU list --------------------------------------------------------------
cpu_list=$(sed -n '/files that took the most CPU/,/wall time/p' "$T/run.out")
top=$(printf '%s\n' "$cpu_list" | sed -n '2p' | awk '{ print $3 }')
cpu_s=$(printf '%s\n' "$cpu_list" | awk '$3 == "cpu.sh" { print $2 }')
p1_s=$(printf '%s\n' "$cpu_list" | awk '$3 == "p1.sh" { print $2 }')
ok "$(awk -v c="$cpu_s" -v p="${p1_s:-0}" 'BEGIN { exit !(c != "" && c >= 0.6 && c > p + 0.4) }'; echo $?)" \
    "2. the CPU list: cpu.sh ${cpu_s:-?} s (its child's awk), p1.sh ${p1_s:-0} s (a sleep); at the top: $top" ||
    why "$cpu_list"

# ---- 3. the hang dump ---------------------------------------------------------
dump=$(sed -n '/^# a run that hung: hang.sh/,/end of hang dump/p' "$T/run.out")
like "$dump" "#   ==== hang dump of test hang.sh" "3. run.sh prints hang.sh's hang dump" ||
    why "$(tail -n 40 "$T/run.out")"
like "$dump" "mpirun --oversubscribe -n 1 .*/ftrain --device cpu --steps 1" \
    "3. the dump's process tree shows the launch and its rank"

# ---- 4. the launch retried ----------------------------------------------------------
like "$(cat "$T/run.out")" "# launches started again after Open MPI failed inside MPI_Init \(tests/launch.sh\): 1" \
    "4. run.sh counts the launch started again"
like "$(cat "$T/run.out")" "#   [0-9:]{8} retry.sh: launch 1 of 3: \[vm:1\] OPAL ERROR: Unreachable" \
    "4. and names its test and Open MPI's error"

# ---- 5. the skip guard; a failing test ----------------------------------------------
TD2=$T/td2
scratch_td "$TD2"
printf '#!/bin/sh\necho 1..2\necho "ok 1 # SKIP no frobnicator here"\necho "ok 2 # skip no GPU visible"\n' >"$TD2/a/sk.sh"
printf '#!/bin/sh\necho 1..1\necho "not ok 1 - broken on purpose"\nexit 1\n' >"$TD2/a/bad.sh"
printf '#!/bin/sh\necho 1..1\necho "ok 1 - fine"\n' >"$TD2/a/fine.sh"
chmod +x "$TD2"/a/*.sh
printf 'quick fine.sh\n' >"$TD2/tiers.txt"
B2=$T/build2
mkdir -p "$B2"
BUILD=$B2 FTRAIN_TEST_DIR=$TD2 FTRAIN_TEST_JOBS=2 sh "$RUN" full >"$T/run2.out" 2>"$T/run2.err"
rc=$?
is "$rc" 1 "5. a disallowed skip and a failing test: exit 1"
like "$(cat "$T/run2.err")" "run.sh: test .*/a/sk.sh skipped 'no frobnicator here', which is not in .*skips-allowed.txt" \
    "5. the skip guard names the test and its reason" || why "$(cat "$T/run2.err")"
like "$(cat "$T/run2.out")" "# allowed skip: sk.sh: no GPU visible" "5. the allowed skip is listed"
like "$(cat "$T/run2.out")" "a/bad.sh .*Failed: 1" "5. prove reports the failing test"

# ---- 6. the quick tier -----------------------------------------------------------
BUILD=$B2 FTRAIN_TEST_DIR=$TD2 FTRAIN_TEST_JOBS=2 sh "$RUN" quick >"$T/run3.out" 2>"$T/run3.err"
rc=$?
is "$rc $(ls "$B2/test-logs" | grep -c '\.tap$')" "0 1" "6. the quick tier runs its one file and passes" ||
    why "$(cat "$T/run3.out" "$T/run3.err")"

# ---- 7. a file in two kinds ------------------------------------------------------
printf 'quick fine.sh\nserial fine.sh\nquiet fine.sh\n' >"$TD2/tiers.txt"
rm -f "$B2"/test-logs/*.tap
BUILD=$B2 FTRAIN_TEST_DIR=$TD2 sh "$RUN" full >"$T/run4.out" 2>"$T/run4.err"
rc=$?
is "$rc $(cat "$T/run4.err") $(ls "$B2/test-logs" | grep -c '\.tap$')" \
    "2 run.sh: $TD2/tiers.txt: fine.sh is both serial and quiet 0" \
    "7. a file both serial and quiet: exit 2, named, nothing run"
done_testing

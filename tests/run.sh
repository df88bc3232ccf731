#!/bin/sh
# run.sh - run the test suite, or its quick tier, under prove: in parallel
# where that is safe, with each file's time, and with a guard against skips.
#
#     BUILD=build sh tests/run.sh full  [PROVE-ARGS...]   (make check)
#     BUILD=build sh tests/run.sh quick [PROVE-ARGS...]   (make check-quick)
#
# PROVE-ARGS go to prove as they are (-v, for one).  docs/testing.md says
# how to run a single test by hand.
#
# Tiers:
#   full    every test: $BUILD/tests/SUBJECT/NAME.t for each
#           tests/SUBJECT/NAME.c, and every tests/SUBJECT/NAME.sh (SUBJECT is
#           a subsystem's folder; tools/ and preload/ are no subjects).  The
#           list comes from the file system, so a new test is in it at once.
#           A C test that is not built is an error; so are two tests of one NAME.
#   quick   the tests named "quick NAME" in tests/tiers.txt: a few minutes on
#           2 cores, yet every subsystem.  A name there that is not a test
#           is an error, so a renamed test cannot quietly leave the tier.
#
# Parallelism: prove -j N (N: FTRAIN_TEST_JOBS, else the number of CPUs + 1:
# the files wait as much as they compute, and at -j 2 on 2 cores the
# parallel part used 47% of the CPU: 611 CPU-seconds in 653 s).
# tests/tiers.txt names the files that cannot run beside any other:
#   serial NAME   one at a time among themselves, beside the parallel ones
#                 (they share one resource, such as the SLURM test cluster);
#                 in a prove of their own, a slot beyond the N: they wait
#                 on that resource most of the time;
#   quiet  NAME   after the parallel part, side by side with the other
#                 quiet files and nothing else: they measure times that a
#                 busy machine would stretch, and mostly sleep, so that
#                 they hold beside each other;
#   alone  NAME   after the quiet ones, one at a time, with nothing else
#                 running (they measure times and use the cores, or need
#                 every core).
# These names must exist as well.  Every other file may run beside any other.
# The parallel files start slowest first, by the times of the last run
# ($BUILD/test-times, at first tests/times.txt; a file with no time yet
# starts first).  Four proves,
# then: the serial files' (in the background, its output printed after the
# parallel files'), the parallel files' (-j N), and, once both are done,
# the quiet files' (all at once) and the alone files' (one at a time).
#
# Skip guard: each test runs through this script's --wrap mode, which copies
# the test's TAP output to $BUILD/test-logs/NAME.tap (its stderr and exit
# status go to prove as before), its wall time to NAME.ms and its CPU time
# (its own and its waited-for children's) to NAME.cpu.  After prove, every
# skip in those logs ("ok N ... # skip REASON", "1..0 # SKIP REASON", any
# case) must match a pattern of tests/skips-allowed.txt, or the run fails
# and names the test and the reason.  A test that left no log fails too.
#
# At the end it prints the 10 slowest files, the 10 that took the most CPU
# and the wall time.
#
# Exit status: 0 when prove passed and every skip is allowed; 1 when a test
# failed or a skip is not allowed; 2 when the runner cannot run: no BUILD,
# an unknown tier, no tests, a name in tests/tiers.txt that is no test.
#
# Environment:
#   BUILD             the build directory (required; make passes it).
#   FTRAIN_TEST_JOBS  prove's -j (default: the number of CPUs + 1).
#   FTRAIN_TEST_DIR   where the tests and the two lists are (default tests);
#                     a scratch directory, to check the runner itself.

self=$(basename "$(dirname "$0")")/$(basename "$0")
cd "$(dirname "$0")/.." || exit 2

# ---- the wrapper prove runs each test through ------------------------------
# run.sh --wrap TEST: run TEST, its stdout also into the log; exit as it did.
if [ "${1:-}" = --wrap ]; then
    t=$2
    log=$FTRAIN_TEST_LOGS/$(basename "$t")
    rm -f "$log.rc"
    t0=$(date +%s%N)
    { "$t"; echo "$?" >"$log.rc"; } | tee "$log.tap"
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000000)) >"$log.ms"
    # The CPU seconds of the test and the processes it waited for (the
    # second line of `times`: children's user and system time, as 1m2.5s;
    # into a file, as `times` in a pipe would run in a child of its own).
    times >"$log.times"
    awk 'NR == 2 {
        c = 0
        for (i = 1; i <= 2; i++) { split($i, a, "m"); sub(/s$/, "", a[2]); c += a[1] * 60 + a[2] }
        printf "%.1f\n", c }' "$log.times" >"$log.cpu"
    rm -f "$log.times"
    rc=$(cat "$log.rc" 2>/dev/null) || rc=1
    # A test killed by a signal: die of the same signal, as prove expects.
    if [ "$rc" -gt 128 ] && [ "$rc" -lt 160 ]; then
        kill -s "$(kill -l "$rc")" $$ 2>/dev/null
    fi
    exit "$rc"
fi

die() {
    echo "run.sh: $*" >&2
    exit 2
}

tier=${1:-}
[ $# -gt 0 ] && shift
case $tier in
full | quick) ;;
"") die "no tier given (usage: BUILD=DIR sh $self full|quick [PROVE-ARGS...])" ;;
*) die "unknown tier '$tier': the tiers are full and quick" ;;
esac
[ -n "${BUILD:-}" ] || die "BUILD is not set (the build directory, such as BUILD=build)"
case $BUILD in *[[:space:]]*) die "BUILD='$BUILD': a build directory with blanks in its name is not supported" ;; esac
[ -d "$BUILD" ] || die "BUILD=$BUILD: no such directory (make BUILD=$BUILD all first)"
export BUILD

TD=${FTRAIN_TEST_DIR:-tests}
TIERS=$TD/tiers.txt
ALLOWED=$TD/skips-allowed.txt
[ -f "$TIERS" ] || die "$TIERS not found"
[ -f "$ALLOWED" ] || die "$ALLOWED not found"

S=$(mktemp -d "${TMPDIR:-/tmp}/ftrain-run.XXXXXX") || die "mktemp failed"
serpid=""
trap '[ -z "$serpid" ] || kill -s TERM -- "-$serpid" 2>/dev/null || kill "$serpid" 2>/dev/null; rm -rf "$S"' EXIT
trap 'exit 130' INT TERM

# ---- the full list: "NAME PATH" lines, from the file system ----------------
# Tests live one folder down, by subject (tests/ckpt/, tests/train/, ...);
# tools/ and preload/ hold programs the tests run, slurm/lab/ the test
# cluster's scripts: none of them is a test.  NAME is the file's name
# alone, so two subjects cannot both have a test of one name.
: >"$S/all"
for c in "$TD"/*/*.c; do
    [ -f "$c" ] || continue
    case $c in "$TD"/tools/* | "$TD"/preload/*) continue ;; esac
    rel=${c#"$TD"/}
    n=$(basename "$c" .c)
    [ -x "$BUILD/tests/${rel%.c}.t" ] || die "$BUILD/tests/${rel%.c}.t is not built (make BUILD=$BUILD all)"
    echo "$n.t $BUILD/tests/${rel%.c}.t" >>"$S/all"
done
for s in "$TD"/*/*.sh; do
    [ -f "$s" ] || continue
    echo "$(basename "$s") $s" >>"$S/all"
done
[ -s "$S/all" ] || die "no tests found: no $TD/SUBJECT/*.c (built as $BUILD/tests/SUBJECT/*.t) and no $TD/SUBJECT/*.sh"
dup=$(cut -d' ' -f1 "$S/all" | sort | uniq -d | head -n 1)
[ -z "$dup" ] || die "two tests are named $dup: $(awk -v n="$dup" '$1 == n { printf "%s ", $2 }' "$S/all")(names must be unique)"

# ---- tests/tiers.txt: KIND NAME lines; every NAME must be a test -----------
: >"$S/quick"
: >"$S/serial"
: >"$S/quiet"
: >"$S/alone"
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    case $line in '' | '#'*) continue ;; esac
    kind=$(echo "$line" | awk 'NF == 2 { print $1 }')
    name=$(echo "$line" | awk 'NF == 2 { print $2 }')
    [ -n "$kind" ] || die "$TIERS:$lineno: expected 'KIND NAME', got '$line'"
    case $kind in
    quick | serial | quiet | alone) ;;
    *) die "$TIERS:$lineno: unknown kind '$kind' (quick, serial, quiet or alone)" ;;
    esac
    case $name in
    *.t) src=$TD/SUBJECT/${name%.t}.c ;;
    *.sh) src=$TD/SUBJECT/$name ;;
    *) die "$TIERS:$lineno: '$name' is no test's name (NAME.t for $TD/SUBJECT/NAME.c, NAME.sh)" ;;
    esac
    awk -v n="$name" '$1 == n { f = 1 } END { exit !f }' "$S/all" ||
        die "$TIERS:$lineno: $kind test '$name' does not exist: no $src (renamed or removed?)"
    echo "$name" >>"$S/$kind"
done <"$TIERS"
[ -s "$S/quick" ] || die "$TIERS names no quick test"
for _a in serial quiet alone; do
    for _b in serial quiet alone; do
        [ "$_a" = "$_b" ] && continue
        grep -Fxf "$S/$_a" "$S/$_b" >"$S/both"
        [ -s "$S/both" ] && die "$TIERS: $(head -n 1 "$S/both") is both $_a and $_b"
    done
done

# The tier's tests: "NAME PATH", the slowest of the last run first.
if [ "$tier" = quick ]; then
    awk 'FILENAME == ARGV[1] { q[$1] = 1; next } $1 in q' "$S/quick" "$S/all" >"$S/tier"
else
    cp "$S/all" "$S/tier"
fi
TIMES=$BUILD/test-times
# A first run (a fresh clone: CI) takes its order from tests/times.txt,
# the times of a full run on a 2-core machine; started in an arbitrary
# order the files packed worse (808 s against 726-778 s).
[ -f "$TIMES" ] || grep -v '^#' "$(dirname "$0")/times.txt" >"$TIMES" 2>/dev/null || : >"$TIMES"
awk 'FILENAME == ARGV[1] { ms[$1] = $2; next } { print ($1 in ms ? ms[$1] : 999999999), $0 }' \
    "$TIMES" "$S/tier" | sort -k1,1nr -k2,2 | cut -d' ' -f2- >"$S/order"

# Three groups, each its own prove: the serial files, one at a time, in a
# prove of their own beside the parallel files' (an extra slot: they
# spend most of their time waiting on the test cluster, so that the
# parallel files keep all N slots meanwhile); the parallel files, prove
# -j N; and, once both are done, the alone files, one by one, with
# nothing else running.  In the parallel prove each file is a sequence of
# its own (a rule seq=PATH each, in the order of the rules: slowest
# first), not one par=GLOB, so that prove starts them in that order.
awk 'FILENAME == ARGV[1] { k[$1] = 1; next } $1 in k { print $2 }' "$S/serial" "$S/order" >"$S/ser"
awk 'FILENAME == ARGV[1] { k[$1] = 1; next } $1 in k { print $2 }' "$S/quiet" "$S/order" >"$S/qui"
awk 'FILENAME == ARGV[1] { k[$1] = 1; next } $1 in k { print $2 }' "$S/alone" "$S/order" >"$S/alo"
cat "$S/serial" "$S/quiet" "$S/alone" >"$S/notpar"
awk 'FILENAME == ARGV[1] { k[$1] = 1; next } !($1 in k) { print $2 }' "$S/notpar" "$S/order" >"$S/par"

JOBS=${FTRAIN_TEST_JOBS:-$(($(nproc 2>/dev/null || echo 1) + 1))}
case $JOBS in '' | *[!0-9]* | 0) die "FTRAIN_TEST_JOBS='$JOBS' is not a positive number" ;; esac

LOGS=$BUILD/test-logs
mkdir -p "$LOGS" || die "cannot make $LOGS"
# One run at a time on a build directory: a second would clear the first's
# logs, and the first's guard would find them gone.
if command -v flock >/dev/null 2>&1; then
    exec 8>"$LOGS/.lock"
    flock -n 8 || die "another tests/run.sh is running on BUILD=$BUILD (lock $LOGS/.lock); wait for it, or use another BUILD"
fi
rm -f "$LOGS"/*.tap "$LOGS"/*.rc "$LOGS"/*.ms "$LOGS"/*.cpu "$LOGS"/*.hang "$LOGS/launch-retries"
export FTRAIN_TEST_LOGS="$LOGS"

echo "# run.sh: tier $tier: $(wc -l <"$S/order") files: $(wc -l <"$S/par") parallel (prove -j $JOBS)," \
    "$(wc -l <"$S/ser") serial in a slot of their own beside them, $(wc -l <"$S/qui") quiet side by side" \
    "and $(wc -l <"$S/alo") alone at the end; TAP logs in $LOGS/"
# run_prove LIST [PROVE-ARGS...]: prove on the files listed in LIST.  The
# paths have no blanks (tests/SUBJECT/NAME.sh, $BUILD/tests/SUBJECT/NAME.t;
# BUILD was checked), so word splitting is safe here.
run_prove() {
    _list=$1
    shift
    # shellcheck disable=SC2046
    prove -f --timer --exec "sh $self --wrap" "$@" $(cat "$_list") 8>&-
}
start=$(date +%s)
status=0
serpid=""
if [ -s "$S/ser" ]; then
    # Its output goes to a file, printed once the parallel prove is done
    # (two proves writing to one terminal would mix their lines).
    echo "# the serial files' prove: its output follows the parallel files'"
    # In a session of its own (setsid -w: its status is prove's), so that a
    # run.sh that is interrupted or killed ends this prove and the tests it
    # started, as one group: a background job ignores the terminal's
    # SIGINT, and killing prove alone would leave its test running.
    _setsid=""
    command -v setsid >/dev/null 2>&1 && _setsid="setsid -w"
    # shellcheck disable=SC2046
    $_setsid prove -f --timer --exec "sh $self --wrap" "$@" $(cat "$S/ser") >"$S/ser.out" 2>&1 8>&- &
    serpid=$!
fi
if [ -s "$S/par" ]; then
    sed 's/^/--rules=seq=/' "$S/par" >"$S/par.rules"
    # shellcheck disable=SC2046
    run_prove "$S/par" -j "$JOBS" $(cat "$S/par.rules") "$@" || status=1
fi
if [ -n "$serpid" ]; then
    wait "$serpid" || status=1
    serpid=""
    echo "# the serial files' prove:"
    cat "$S/ser.out"
fi
if [ -s "$S/qui" ]; then
    echo "# the quiet files, side by side:"
    run_prove "$S/qui" -j "$(wc -l <"$S/qui")" "$@" || status=1
fi
if [ -s "$S/alo" ]; then
    echo "# the alone files, one by one:"
    run_prove "$S/alo" "$@" || status=1
fi
end=$(date +%s)

# ---- the skip guard ---------------------------------------------------------
# The patterns in force: "any" lines always, "sanitized" lines when ftrain
# links a sanitizer's runtime.
sanitized=0
ldd "$BUILD/ftrain" 2>/dev/null | grep -Eq 'lib(asan|tsan|ubsan)' && sanitized=1
: >"$S/patterns"
lineno=0
while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    case $line in '' | '#'*) continue ;; esac
    scope=${line%%[ 	]*}
    pat=${line#"$scope"}
    pat=$(printf '%s\n' "$pat" | sed 's/^[ 	]*//; s/[ 	]*$//')
    [ -n "$pat" ] || die "$ALLOWED:$lineno: expected 'any|sanitized PATTERN', got '$line'"
    case $scope in
    any) printf '%s\n' "$pat" >>"$S/patterns" ;;
    sanitized) [ "$sanitized" = 1 ] && printf '%s\n' "$pat" >>"$S/patterns" ;;
    *) die "$ALLOWED:$lineno: unknown scope '$scope' (any or sanitized)" ;;
    esac
done <"$ALLOWED"

# skips LOG: one reason a line for each skip in the TAP log LOG.  A plan of
# 1..0 skips the whole file; a test line skips when its first '#' starts a
# SKIP directive (TAP's grammar, as prove reads it).
skips() {
    awk '
    /^1\.\.0([^0-9]|$)/ {
        r = $0; sub(/^1\.\.0[ \t]*/, "", r)
        if (tolower(r) ~ /^#[ \t]*skip/) { sub(/^#[ \t]*[^ \t]*[ \t]*/, "", r) }
        print r; next
    }
    /^ok([ \t]|$)/ {
        i = index($0, "#"); if (!i) next
        r = substr($0, i + 1); sub(/^[ \t]*/, "", r)
        if (tolower(r) !~ /^skip([^a-z0-9_]|$)/) next
        r = substr(r, 5); sub(/^[ \t]*/, "", r)
        print r
    }' "$1"
}

allowed=0
: >"$S/bad"
while read -r name path; do
    log=$LOGS/$name.tap
    if [ ! -f "$log" ]; then
        # prove stopped early (a bail out), ran the test some other way (an
        # --exec among PROVE-ARGS), or the log was removed.
        echo "run.sh: $path left no log in $LOGS: the skip guard cannot check it" >>"$S/bad"
        continue
    fi
    skips "$log" >"$S/why"
    while IFS= read -r why; do
        if printf '%s\n' "$why" | grep -Eiq -f "$S/patterns"; then
            allowed=$((allowed + 1))
            echo "# allowed skip: $name: $why"
        else
            echo "run.sh: test $path skipped '$why', which is not in $ALLOWED" >>"$S/bad"
        fi
    done <"$S/why"
done <"$S/order"

# ---- hang dumps ---------------------------------------------------------------
# A run about to be ended by its timeout left what its processes were doing
# (tests/lib.sh, hang_dump): printed here, where CI's log shows it.
for h in "$LOGS"/*.hang; do
    [ -f "$h" ] || continue
    echo "# a run that hung: $(basename "$h" .hang) (its dump, $h):"
    sed 's/^/#   /' "$h"
done

# ---- launches started again ------------------------------------------------------
# tests/launch.sh launched a run again after Open MPI's start-up failed
# inside MPI_Init: never silent, and counted here.
if [ -s "$LOGS/launch-retries" ]; then
    echo "# launches started again after Open MPI failed inside MPI_Init (tests/launch.sh): $(wc -l <"$LOGS/launch-retries")"
    sed 's/^/#   /' "$LOGS/launch-retries"
fi

# ---- times ------------------------------------------------------------------
: >"$S/ms"
while read -r name path; do
    [ -f "$LOGS/$name.ms" ] && echo "$(cat "$LOGS/$name.ms") $name" >>"$S/ms"
done <"$S/order"
echo "# the 10 slowest files (ms):"
sort -k1,1nr "$S/ms" | head -n 10 | awk '{ printf "#   %8d  %s\n", $1, $2 }'
: >"$S/cpu"
while read -r name path; do
    [ -s "$LOGS/$name.cpu" ] && echo "$(cat "$LOGS/$name.cpu") $name" >>"$S/cpu"
done <"$S/order"
echo "# the 10 files that took the most CPU (seconds; of $(awk '{ s += $1 } END { printf "%.0f", s }' "$S/cpu") in all):"
sort -k1,1nr "$S/cpu" | head -n 10 | awk '{ printf "#   %8.1f  %s\n", $1, $2 }'
# Keep the times of this run for the next one's order.
awk 'FILENAME == ARGV[1] { ms[$2] = $1; next } !($1 in ms) { print } END { for (n in ms) print n, ms[n] }' \
    "$S/ms" "$TIMES" | sort >"$S/times" && cp "$S/times" "$TIMES"
echo "# tier $tier: wall time $((end - start)) s with prove -j $JOBS (and the serial files' slot); $allowed allowed skip(s); load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"

if [ -s "$S/bad" ]; then
    cat "$S/bad" >&2
    echo "run.sh: FAIL: the skip guard: fix what keeps the test from running (a package" \
        "scripts/deps.sh should install, a broken probe); only a reason that is acceptable" \
        "in CI goes into $ALLOWED, with a comment saying why" >&2
    exit 1
fi
[ "$status" -eq 0 ] || exit 1
exit 0

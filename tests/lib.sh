# lib.sh - shared helpers for ftrain's shell tests (POSIX sh, TAP output).
#
# HowTo: in a test script
#
#     . "$(dirname "$0")/lib.sh"
#     plan 3                      # or no plan, and `done_testing` at the end
#     ok "$cond_rc" "name"        # ok 0 "x" passes, any other number fails
#     is "$got" "$want" "name"
#     mpi 2 --data line --steps 5 >"$T/out" 2>"$T/err"; rc=$?
#     done_testing
#
# What it sets up:
#   BUILD   the build directory (default build), read from the environment.
#   FTRAIN  "$BUILD/ftrain".
#   T       a fresh temporary directory, removed on exit (kept when
#           FTRAIN_KEEP_TMP=1, for debugging; its path is printed then).
#
# Helpers:
#   plan N, ok RC NAME, is GOT WANT NAME, like TEXT REGEX NAME (grep -E),
#   diag TEXT..., why TEXT... (a failure's details, on stderr),
#   skip_all REASON, skip NAME REASON, done_testing.
#   mpi N ARGS...   run "$FTRAIN ARGS..." on N ranks under mpirun with the
#                   settings that work on one machine as root (shared-memory
#                   transport only, oversubscription allowed), bounded by
#                   `timeout $FTRAIN_TIMEOUT` (default 120 s): a hang fails.
#   mpi_bg N ARGS...  the same in the background; sets MPI_PID (the timeout
#                   process; its exit code is mpirun's).  `wait "$MPI_PID"`
#                   and then clear MPI_PID; a run still going when the test
#                   exits is stopped (TERM, then KILL after 5 s).
#   track_bg PID    register a background process started with `cmd &`:
#                   when the test exits (passing, failing or killed), it
#                   and its children are stopped (TERM, then KILL after 5 s).
#   run CMD...      CMD's stdout in $T/out, stderr in $T/err, status in $rc.
#   now             seconds since the epoch with nanoseconds (date +%s.%N).
#   secs A B        B - A to a tenth of a second;  below X LIMIT: X < LIMIT.
#   wait_for SECONDS CMD...  poll CMD every 0.05 s until it succeeds; returns
#                   1 after SECONDS.
#   hash_of FILE    the param_hash of the "done:" line in FILE.
#   rank_pid FILE R the pid of rank R from the "world: rank R ... pid P"
#                   lines rank 0 prints at start.
#   need_mpi        skip_all unless mpirun and $FTRAIN exist.
#   have_shim NAME  sets SHIM to the LD_PRELOAD shim tests/preload/NAME.so
#                   in $BUILD; returns 1, with SHIM_WHY saying why, when it
#                   is not built or $FTRAIN is a sanitized build (no shim
#                   can come before the ASan runtime).
#
# Exit status: non-zero when any test failed or the plan was not met.

BUILD=${BUILD:-build}
FTRAIN="$BUILD/ftrain"
FTRAIN_TIMEOUT=${FTRAIN_TIMEOUT:-120}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Keep Open MPI quiet and local: no network probing, no help aggregation.
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none

_tap_n=0
_tap_failed=0
_tap_planned=0

T=$(mktemp -d "${TMPDIR:-/tmp}/ftrain-test.XXXXXX") || { echo "Bail out! mktemp"; exit 1; }
_tap_bg=""
track_bg() {
    _tap_bg="$_tap_bg $1"
}
# _tap_stop PID: TERM (it reaches mpirun through timeout(1)), then, after 5 s,
# KILL to what is left of PID and its children and grandchildren.
_tap_stop() {
    kill -TERM "$1" 2>/dev/null || return 0
    _c=0
    while kill -0 "$1" 2>/dev/null && [ "$_c" -lt 50 ]; do
        sleep 0.1
        _c=$((_c + 1))
    done
    for _p in $(pgrep -P "$1" 2>/dev/null); do
        pkill -9 -P "$_p" 2>/dev/null
        kill -9 "$_p" 2>/dev/null
    done
    kill -9 "$1" 2>/dev/null
}
_tap_cleanup() {
    # Stop the runs a test left in the background.
    for _b in ${MPI_PID:-} $_tap_bg; do
        _tap_stop "$_b"
    done
    if [ "${FTRAIN_KEEP_TMP:-0}" = 1 ]; then
        echo "# kept $T"
    else
        rm -rf "$T"
    fi
}
trap _tap_cleanup EXIT
trap 'exit 130' INT TERM

plan() {
    _tap_planned=$1
    echo "1..$1"
}

diag() {
    printf '%s\n' "$*" | sed 's/^/# /'
}

# why TEXT...: the details of a failure, on stderr, so that prove shows them
# without -v (a CI log keeps them).
why() {
    printf '%s\n' "$@" | sed 's/^/# /' >&2
}

# ok RC NAME: RC 0 passes.
ok() {
    _tap_n=$((_tap_n + 1))
    if [ "$1" -eq 0 ] 2>/dev/null; then
        echo "ok $_tap_n - $2"
        return 0
    fi
    echo "not ok $_tap_n - $2"
    _tap_failed=$((_tap_failed + 1))
    return 1
}

# is GOT WANT NAME
is() {
    if [ "$1" = "$2" ]; then
        ok 0 "$3"
        return 0
    fi
    ok 1 "$3"
    why "     got: '$1'" "expected: '$2'"
    return 1
}

# like TEXT REGEX NAME: TEXT matches the extended regular expression.
like() {
    if printf '%s\n' "$1" | grep -Eq -- "$2"; then
        ok 0 "$3"
        return 0
    fi
    ok 1 "$3"
    why "text: $(printf '%s' "$1" | head -c 600)" "does not match: $2"
    return 1
}

skip() {
    _tap_n=$((_tap_n + 1))
    echo "ok $_tap_n # skip $1: $2"
}

skip_all() {
    echo "1..0 # SKIP $1"
    exit 0
}

done_testing() {
    if [ "$_tap_planned" -eq 0 ]; then
        echo "1..$_tap_n"
    elif [ "$_tap_planned" -ne "$_tap_n" ]; then
        echo "# planned $_tap_planned tests but ran $_tap_n"
        exit 1
    fi
    [ "$_tap_failed" -eq 0 ] || exit 1
    exit 0
}

need_mpi() {
    [ -x "$FTRAIN" ] || skip_all "$FTRAIN not built (make $FTRAIN)"
    command -v mpirun >/dev/null 2>&1 || skip_all "mpirun not installed"
}

have_shim() {
    SHIM="$BUILD/tests/preload/$1.so"
    SHIM_WHY=""
    if [ ! -f "$SHIM" ]; then
        SHIM_WHY="$SHIM not built (make $SHIM)"
    elif ldd "$FTRAIN" 2>/dev/null | grep -q libasan; then
        SHIM_WHY="sanitized build: an LD_PRELOAD shim cannot come before the ASan runtime"
    fi
    [ -z "$SHIM_WHY" ]
}

mpi() {
    _mpi_n=$1
    shift
    timeout -k 5 "$FTRAIN_TIMEOUT" mpirun --oversubscribe -n "$_mpi_n" "$FTRAIN" --device cpu "$@"
}

mpi_bg() {
    _mpi_n=$1
    shift
    timeout -k 5 "$FTRAIN_TIMEOUT" mpirun --oversubscribe -n "$_mpi_n" "$FTRAIN" --device cpu "$@" &
    MPI_PID=$!
    track_bg "$MPI_PID"
}

run() {
    "$@" >"$T/out" 2>"$T/err"
    rc=$?
}

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
below() { awk -v x="$1" -v l="$2" 'BEGIN { exit !(x < l) }'; }

# flip FILE: invert one byte in the middle of FILE (python3).
flip() {
    python3 - "$1" <<'EOF'
import os, sys
p = sys.argv[1]
n = os.path.getsize(p)
with open(p, "r+b") as f:
    f.seek(n // 2)
    b = f.read(1)
    f.seek(n // 2)
    f.write(bytes([b[0] ^ 0xFF]))
EOF
}

wait_for() {
    _wf_max=$(($1 * 20))
    shift
    _wf_i=0
    while ! "$@" 2>/dev/null; do
        _wf_i=$((_wf_i + 1))
        [ "$_wf_i" -ge "$_wf_max" ] && return 1
        sleep 0.05
    done
    return 0
}

hash_of() {
    sed -n 's/^done: .*param_hash=\([0-9a-f]\{16\}\).*/\1/p' "$1" | tail -n 1
}

rank_pid() {
    sed -n "s/^world: rank $2 local [0-9]* host [^ ]* pid \([0-9]*\).*/\1/p" "$1" | head -n 1
}

# lib.sh - shared helpers for ftrain's shell tests (POSIX sh, TAP output).
# Every shell test sources it: one ok/is/like/skip/plan for all of them.
#
# HowTo: in a test script
#
#     . "$(dirname "$0")/../lib.sh"   (from tests/SUBJECT/NAME.sh)
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
#   OMPI_*  Open MPI settings for runs on this one machine as root (see
#           below).  A test whose runs go through SLURM across fake nodes
#           sets LIB_KEEP_MPI_ENV=1 before sourcing this file, and the
#           OMPI_* environment is left as it was.
#   traps   on exit (passing, failing, or INT, TERM, HUP or PIPE) the
#           registered background runs are stopped, the at_exit commands
#           run, and $T is removed.  A test must not replace the EXIT trap:
#           it registers its own cleanup with at_exit.
#
# Helpers:
#   plan N (N > 0), ok RC NAME, is GOT WANT NAME, like TEXT REGEX NAME
#   (grep -E), diag TEXT... (a comment, on stdout), why TEXT... (a
#   failure's details, on stderr, which prove shows without -v),
#   skip NAME REASON (one test that cannot run here), skip_n COUNT NAME
#   REASON (COUNT of them), skip_all REASON (the whole file: "1..0 # SKIP",
#   the only way a file may run no test), done_testing (the plan, when none
#   was given, and the exit status; a file that ran no test at all fails).
#   all_passed      0 when at least one test ran, none failed, and (in an
#                   at_exit command) the script is not exiting non-zero.
#   at_exit CMD     run the shell command CMD when the test exits, after the
#                   background runs are stopped and before $T is removed
#                   (in the order registered).
#   mpi N ARGS...   run "$FTRAIN ARGS..." on N ranks under mpirun with the
#                   settings that work on one machine as root (shared-memory
#                   transport only, oversubscription allowed), bounded by
#                   `timeout $FTRAIN_TIMEOUT` (default 120 s): a hang fails.
#                   The launch goes through tests/launch.sh ($LAUNCH), which
#                   launches again (saying so) when Open MPI's start-up
#                   failed inside MPI_Init.
#   mpi_bg N ARGS...  the same in the background; sets MPI_PID (the timeout
#                   process; its exit code is mpirun's).  `wait "$MPI_PID"`
#                   and then clear MPI_PID; a run still going when the test
#                   exits is stopped (TERM, then KILL after 5 s).
#   mpirun_of PID   the pid of the mpirun under PID (MPI_PID: timeout(1),
#                   then launch.sh, then mpirun); returns 1 when there is none.
#   track_bg PID    register a background process started with `cmd &`:
#                   when the test exits (passing, failing or killed), it
#                   and its children are stopped (TERM, then KILL after 5 s).
#   run CMD...      CMD's stdout in $T/out, stderr in $T/err, status in $rc;
#                   when RUN_ERR_LOG names a file, CMD's stderr is appended
#                   to it too (to look for sanitizer reports at the end).
#   now             seconds since the epoch with nanoseconds (date +%s.%N).
#   secs A B        B - A to a tenth of a second;  below X LIMIT: X < LIMIT.
#   hold_lock FILE HOLDER  a process holding FILE's fcntl lock, as another launch
#                   would (HOLDER_PID; stopped when the test ends).
#   wait_for SECONDS CMD...  poll CMD every 0.05 s until it succeeds; returns
#                   1 after SECONDS.
#   wait_line FILE REGEX SECONDS  poll FILE every 0.2 s until a line of it
#                   matches REGEX (grep -E); returns 1 after SECONDS.
#   progress_ge FILE N  FILE holds at least N progress ("epoch ...") lines.
#   tap_from FILE WHAT [PREFIX]  a checker's PASS/FAIL/plan lines as tests.
#   hash_of FILE    the param_hash of the "done:" line in FILE.
#   rank_pid FILE R the pid of rank R from the "world: rank R ... pid P"
#                   lines rank 0 prints at start.
#   need_python MODULE...  the Python tests' preamble: PY is $PYTHON (default
#                   /usr/bin/python3), skip_all, saying which and how to get
#                   it, unless it exists and imports every MODULE (numpy,
#                   torch); PYTHONDONTWRITEBYTECODE=1 exported (no
#                   __pycache__ in the source tree).
#   need_torch_gloo need_python numpy torch, and torch.distributed with
#                   gloo (the PyTorch example's tests).
#   need_mpi        skip_all unless mpirun and $FTRAIN exist.
#   have_shim NAME  sets SHIM to the LD_PRELOAD shim tests/preload/NAME.so
#                   in $BUILD; returns 1, with SHIM_WHY saying why, when it
#                   is not built or $FTRAIN is a sanitized build (no shim
#                   can come before the ASan runtime).
#
# Exit status: non-zero when any test failed, the plan was not met, or no
# test ran.  The file works under `set -u` (the SLURM tests use it).

BUILD=${BUILD:-build}
FTRAIN="$BUILD/ftrain"
FTRAIN_TIMEOUT=${FTRAIN_TIMEOUT:-120}
# The launcher beside this file (tests/SUBJECT/NAME.sh sources ../lib.sh).
LAUNCH=$(cd "$(dirname "$0")/.." 2>/dev/null && pwd)/launch.sh
[ -f "$LAUNCH" ] || LAUNCH=$(pwd)/tests/launch.sh
[ -f "$LAUNCH" ] || { echo "Bail out! tests/lib.sh: no launch.sh beside it (looked in $(dirname "$0")/.. and tests/)"; exit 1; }
# Which test a launch retry (tests/launch.sh) was in.
FTRAIN_TEST_FILE=$(basename "$0")
export FTRAIN_TEST_FILE
if [ "${LIB_KEEP_MPI_ENV:-0}" != 1 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # Keep Open MPI quiet and local: no network probing, no help aggregation.
    export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
    export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
    # Waiting ranks give the CPU up: Open MPI yields on its own only when it
    # sees more ranks than cores, and two tests of 2 ranks each side by side
    # on 2 cores would otherwise spin against each other (a 2-rank run: 10.0
    # s of CPU spinning, 6.6 s yielding, the same result).
    export OMPI_MCA_mpi_yield_when_idle=1
    # hwloc (each rank's and mpirun's view of the machine) without the I/O
    # devices, which no CPU run here uses: reading every PCI device's config
    # space was an eighth of a 3-rank launch's CPU on a virtual machine.
    export HWLOC_COMPONENTS="${HWLOC_COMPONENTS:--pci,-linuxio}"
    # PMIx authenticates each rank to mpirun with munge when munged runs,
    # and the SLURM tests start and stop munged (tests/slurm/lab) while
    # other tests launch: a rank that made its credential before munged
    # went away is refused ("OPAL ERROR: Unreachable in file
    # ext3x_client.c"), and mpirun may hang.  Stopping and starting munged
    # every 0.15 s beside 3 loops of 3-rank launches failed or hung most of
    # them; with the native (uid) check, none of 75.  One machine, one
    # user: native is all these launches need.
    export PMIX_MCA_psec=native
fi

_tap_n=0
_tap_failed=0
_tap_planned=0
_tap_exit=0
MPI_PID=${MPI_PID:-}

T=$(mktemp -d "${TMPDIR:-/tmp}/ftrain-test.XXXXXX") || { echo "Bail out! mktemp"; exit 1; }
# An absolute path, so that $T stays right in a test that changes directory.
case $T in /*) ;; *) T=$(pwd)/$T ;; esac
if [ "${LIB_KEEP_MPI_ENV:-0}" != 1 ]; then
    # mpirun's session directories (pid.N, its PMIx rendezvous) under $T,
    # removed with it: an mpirun that a test kills leaves its directory in
    # the shared /tmp/ompi.HOST.UID, and with 32768 pids reused within one
    # suite a later mpirun of another file may be given the same pid.  (A
    # later mpirun on such a leftover was seen to run well, 25 times; the
    # "OPAL ERROR: Unreachable" failures once blamed on them were munge's,
    # see PMIX_MCA_psec below.  A directory per test keeps /tmp clean.)
    mkdir -p "$T/ompi" && export OMPI_MCA_orte_tmpdir_base="$T/ompi"
fi
_tap_bg=""
_MPI_FG_WATCH=""
track_bg() {
    _tap_bg="$_tap_bg $1"
}
_tap_at_exit=""
at_exit() {
    _tap_at_exit="$_tap_at_exit$1
"
}
# _tap_ours PID: PID is a live (not zombie) child of this shell, so neither a
# process that has ended nor an unrelated one that got its pid since.
_tap_ours() {
    if [ ! -d /proc/self ]; then
        kill -0 "$1" 2>/dev/null
        return
    fi
    # /proc/PID/stat: "PID (COMM) STATE PPID ...", and COMM may hold blanks.
    _st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    # shellcheck disable=SC2086 # split into the state, the parent's pid, ...
    set -- ${_st##*) }
    [ "${2:-}" = "$$" ] && [ "${1:-Z}" != Z ]
}
# _tap_tree PID: PID and its descendants, a line each from one ps:
# "PID PPID STAT WCHAN AGE ARGS" (the hang dump shows them; _tap_stop
# takes the pids).
_tap_tree() {
    ps -e -o pid=,ppid=,stat=,wchan:24=,etimes=,args= 2>/dev/null | awk -v root="$1" '
        { line[$1] = $0; par[$1] = $2; n++; pid[n] = $1 }
        END {
            keep[root] = 1
            for (c = 1; c;) { c = 0; for (i = 1; i <= n; i++)
                if (!(pid[i] in keep) && (par[pid[i]] in keep)) { keep[pid[i]] = 1; c = 1 } }
            for (i = 1; i <= n; i++) if (pid[i] in keep) print line[pid[i]]
        }'
}
# _tap_stop PID: TERM (it reaches mpirun through timeout(1)), then, after 5 s,
# KILL to what is left of PID and all its descendants.
_tap_stop() {
    _tap_ours "$1" || return 0
    kill -TERM "$1" 2>/dev/null || return 0
    _c=0
    while _tap_ours "$1" && [ "$_c" -lt 50 ]; do
        sleep 0.1
        _c=$((_c + 1))
    done
    _tap_ours "$1" || return 0
    # shellcheck disable=SC2046 # pids
    kill -9 $(_tap_tree "$1" | awk '{ print $1 }') 2>/dev/null
}
_tap_cleanup() {
    _tap_exit=$?
    # Stop the runs a test left in the background.
    [ -z "$_MPI_FG_WATCH" ] || kill "$_MPI_FG_WATCH" 2>/dev/null
    for _b in $MPI_PID $_tap_bg; do
        _tap_stop "$_b"
    done
    # The test's own cleanup (at_exit), while $T is still there.
    eval "$_tap_at_exit"
    if [ "${FTRAIN_KEEP_TMP:-0}" = 1 ]; then
        echo "# kept $T"
    else
        rm -rf "$T"
    fi
}
trap _tap_cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 141' PIPE
trap 'exit 143' TERM

plan() {
    case $1 in
    '' | 0 | *[!0-9]*)
        # "1..0" would read as "skip all": a file skips only through skip_all.
        echo "Bail out! plan '$1': a plan needs a number of tests above 0 (skip_all REASON skips a file)"
        exit 1
        ;;
    esac
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

# skip NAME REASON: one test that cannot run here.
skip() {
    _tap_n=$((_tap_n + 1))
    echo "ok $_tap_n # skip $1: $2"
}

# skip_n COUNT NAME REASON: COUNT tests that cannot run here, numbered in
# their names.
skip_n() {
    _sk=0
    while [ "$_sk" -lt "$1" ]; do
        _sk=$((_sk + 1))
        skip "$2 ($_sk of $1)" "$3"
    done
}

skip_all() {
    echo "1..0 # SKIP $*"
    exit 0
}

# all_passed: at least one test ran, none failed, and the script is not
# exiting non-zero (in an at_exit command: a bail-out or a kill).
all_passed() {
    [ "$_tap_n" -gt 0 ] && [ "$_tap_failed" -eq 0 ] && [ "$_tap_exit" -eq 0 ]
}

done_testing() {
    if [ "$_tap_n" -eq 0 ]; then
        # A file whose every branch fell through would otherwise print
        # "1..0", which TAP reads as "skip all": that must not pass.
        echo "not ok 1 - no test ran (a file with nothing to run here says why with skip_all REASON)"
        echo "1..1"
        exit 1
    fi
    if [ "$_tap_planned" -eq 0 ]; then
        echo "1..$_tap_n"
    elif [ "$_tap_planned" -ne "$_tap_n" ]; then
        why "planned $_tap_planned tests but ran $_tap_n"
        exit 1
    fi
    [ "$_tap_failed" -eq 0 ] || exit 1
    exit 0
}

# need_ckpt_lib: FTRAIN_CKPT_LIB, the checkpoint library the Python binding
# loads, as an absolute path, exported: the one given, else $BUILD's; the
# test skips, saying which, when it is missing.  Sets from_tree to 1 when
# it is $BUILD's.
need_ckpt_lib() {
    if [ -n "${FTRAIN_CKPT_LIB:-}" ]; then
        [ -f "$FTRAIN_CKPT_LIB" ] || skip_all "FTRAIN_CKPT_LIB=$FTRAIN_CKPT_LIB does not exist"
        case $FTRAIN_CKPT_LIB in /*) ;; *) FTRAIN_CKPT_LIB=$(pwd)/$FTRAIN_CKPT_LIB ;; esac
        from_tree=0
    else
        case $BUILD in /*) _lib_dir=$BUILD ;; *) _lib_dir=$(pwd)/$BUILD ;; esac
        [ -f "$_lib_dir/libftrain-ckpt.so.2" ] ||
            skip_all "$BUILD/libftrain-ckpt.so.2 not built (make $BUILD/libftrain-ckpt.so.2)"
        FTRAIN_CKPT_LIB=$_lib_dir/libftrain-ckpt.so.2
        from_tree=1
    fi
    export FTRAIN_CKPT_LIB
}

need_python() {
    PY=${PYTHON:-/usr/bin/python3}
    [ -x "$PY" ] || skip_all "$PY not found (set PYTHON)"
    for _np_mod in "$@"; do
        "$PY" -c "import $_np_mod" 2>/dev/null ||
            skip_all "$PY has no $_np_mod (apt-get install python3-$_np_mod)"
    done
    export PYTHONDONTWRITEBYTECODE=1
}

need_torch_gloo() {
    need_python numpy torch
    "$PY" -c 'import torch.distributed as d; assert d.is_available() and d.is_gloo_available()' 2>/dev/null ||
        skip_all "$PY has no torch with torch.distributed on gloo (apt-get install python3-torch)"
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

# hang_dump: what this test's processes are doing, for a run about to be
# ended by its timeout: the tree under this shell (state, kernel wait
# channel, age, command), each ftrain, mpirun and python process's kernel
# stack and, where gdb is installed, its threads' backtraces.
hang_dump() {
    echo "==== hang dump of test $(basename "$0") (pid $$) at $(date '+%H:%M:%S'), load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
    _hd_tree=$(_tap_tree "$$")
    # In a variable, not a file: two runs of one test may dump at once.
    printf '%s\n' "$_hd_tree"
    for _h in $(printf '%s\n' "$_hd_tree" | awk '$6 ~ /(^|\/)(ftrain|mpirun|orterun|prterun|python3?)$/ { print $1 }'); do
        echo "---- $_h: $(tr '\0' ' ' <"/proc/$_h/cmdline" 2>/dev/null | cut -c1-200)"
        for _k in /proc/"$_h"/task/*; do
            echo "  task ${_k##*/} ($(cat "$_k/comm" 2>/dev/null)): $(cat "$_k/wchan" 2>/dev/null)"
            sed 's/^/    /' "$_k/stack" 2>/dev/null | head -n 12
        done
        if command -v gdb >/dev/null 2>&1; then
            timeout 30 gdb -p "$_h" -batch -nx -ex 'thread apply all bt 20' </dev/null 2>&1 |
                grep -E '^(Thread|#)' | head -n 120
        fi
    done
    echo "==== end of hang dump"
}
# _mpi_watch [PID]: in the background, FTRAIN_TIMEOUT - 3 s from now, the
# hang dump, unless killed before (mpi does once its run ends) or PID, when
# given, has ended: into $FTRAIN_TEST_LOGS/NAME.hang, which tests/run.sh
# prints at the end (the run's own stderr is often a file a check reads),
# else (a test run by hand) into the run's own stderr.  Sets _MPI_WATCH
# (the watcher's pid; a TERM ends it and its sleep).
_mpi_watch() {
    _w_after=$((FTRAIN_TIMEOUT > 6 ? FTRAIN_TIMEOUT - 3 : FTRAIN_TIMEOUT))
    _w_to=""
    [ -n "${FTRAIN_TEST_LOGS:-}" ] && [ -d "$FTRAIN_TEST_LOGS" ] && _w_to=$FTRAIN_TEST_LOGS/$(basename "$0").hang
    (
        # With a log file to write to, nothing of the test's own: no
        # output of the test's stays open in it.
        [ -z "$_w_to" ] || exec >/dev/null 2>&1
        # The shell that started it (/proc/self: this subshell, as the
        # shell itself opens the file): gone (this one reparented), no dump.
        # shellcheck disable=SC2086 # split into the state, the parent, ...
        _w_parent() { _w_pp=""; read -r _w_st </proc/self/stat && set -- ${_w_st##*) } && _w_pp=$2; }
        _w_parent
        _w_was=$_w_pp
        sleep "$_w_after" &
        _w_sleep=$!
        trap 'kill "$_w_sleep" 2>/dev/null; exit 0' TERM
        wait "$_w_sleep"
        _w_parent
        { [ -z "${1:-}" ] || kill -0 "$1" 2>/dev/null; } && [ "$_w_pp" = "$_w_was" ] || exit 0
        if [ -n "$_w_to" ]; then hang_dump >>"$_w_to" 2>&1; else hang_dump >&2; fi
    ) </dev/null &
    _MPI_WATCH=$!
}

mpi() {
    _mpi_n=$1
    shift
    _mpi_watch
    _MPI_FG_WATCH=$_MPI_WATCH
    timeout -k 5 "$FTRAIN_TIMEOUT" sh "$LAUNCH" mpirun --oversubscribe -n "$_mpi_n" "$FTRAIN" --device cpu "$@"
    _mpi_rc=$?
    kill "$_MPI_FG_WATCH" 2>/dev/null
    _MPI_FG_WATCH=""
    return "$_mpi_rc"
}

mpirun_of() {
    for _mo in $(pgrep -P "$1" 2>/dev/null); do
        case $(cat "/proc/$_mo/comm" 2>/dev/null) in
        mpirun | orterun) echo "$_mo" && return 0 ;;
        esac
        _mo2=$(pgrep -P "$_mo" -x 'mpirun|orterun' 2>/dev/null | head -n 1)
        [ -z "$_mo2" ] || { echo "$_mo2" && return 0; }
    done
    return 1
}

mpi_bg() {
    _mpi_n=$1
    shift
    timeout -k 5 "$FTRAIN_TIMEOUT" sh "$LAUNCH" mpirun --oversubscribe -n "$_mpi_n" "$FTRAIN" --device cpu "$@" &
    MPI_PID=$!
    track_bg "$MPI_PID"
    _mpi_watch "$MPI_PID"
    track_bg "$_MPI_WATCH"
}

run() {
    "$@" >"$T/out" 2>"$T/err"
    rc=$?
    if [ -n "${RUN_ERR_LOG:-}" ]; then
        cat "$T/err" >>"$RUN_ERR_LOG"
    fi
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

# hold_lock FILE HOLDER: a process that holds FILE's lock (fcntl, as
# ftrain's launch.lock is taken) with the holder text HOLDER in it, as a
# launch on another host would; HOLDER_PID is its pid (tracked: it is
# stopped when the test ends).  Returns 1 when it has not taken the lock
# within 10 s.
hold_lock() {
    rm -f "$T/.lock-held"
    python3 - "$1" "$2" "$T/.lock-held" <<'PY' &
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, sys.argv[2].encode() + b"\n")
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
open(sys.argv[3], "w").close()
time.sleep(120)
PY
    HOLDER_PID=$!
    track_bg "$HOLDER_PID"
    wait_for 10 test -f "$T/.lock-held"
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

wait_line() {
    _wl_end=$(($(date +%s) + $3))
    while ! grep -Eq -- "$2" "$1" 2>/dev/null; do
        [ "$(date +%s)" -ge "$_wl_end" ] && return 1
        sleep 0.2
    done
    return 0
}

# tap_from FILE WHAT [NAME_PREFIX]: a checker's "PASS name" / "FAIL name:
# why" lines as TAP tests (NAME_PREFIX before each name), its other lines
# as notes.  The checker states first how many checks it makes ("plan N");
# one more test wants exactly N PASS and FAIL lines, so that a checker that
# stops printing, or never ran (no FILE), fails.
tap_from() {
    _tf_planned="" _tf_seen=0
    if [ -f "$1" ]; then
        while IFS= read -r _tf_line; do
            case $_tf_line in
            "PASS "*) ok 0 "${3:-}${_tf_line#PASS }"; _tf_seen=$((_tf_seen + 1)) ;;
            "FAIL "*) ok 1 "${3:-}${_tf_line#FAIL }"; _tf_seen=$((_tf_seen + 1)) ;;
            "plan "*) _tf_planned=${_tf_line#plan } ;;
            *) diag "$_tf_line" ;;
            esac
        done <"$1"
    fi
    is "$_tf_seen" "${_tf_planned:-no plan line}" "$2: as many checks reported as planned (${_tf_planned:-none})"
}

progress_ge() {
    _pg=$(grep -c '^epoch ' "$1" 2>/dev/null)
    [ "${_pg:-0}" -ge "$2" ]
}

hash_of() {
    sed -n 's/^done: .*param_hash=\([0-9a-f]\{16\}\).*/\1/p' "$1" | tail -n 1
}

rank_pid() {
    sed -n "s/^world: rank $2 local [0-9]* host [^ ]* pid \([0-9]*\).*/\1/p" "$1" | head -n 1
}

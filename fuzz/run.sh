#!/bin/sh
# run.sh - run the libFuzzer targets that `make fuzz` built, one after the
# other, and print what each did.  Called by mk/fuzz.mk; see docs/fuzz.md.
#
#   fuzz/run.sh DIR SECONDS TARGET:MAX_LEN...
#
# For each target: the seeds fuzz/corpus/TARGET/ are copied into
# DIR/corpus/TARGET/ (the working corpus, kept between runs; the tree's
# copy is never written), DIR/TARGET runs for SECONDS with -max_len=MAX_LEN
# and fuzz/TARGET.dict when there is one, its output goes to
# DIR/logs/TARGET.log and its crash, leak, timeout and out-of-memory inputs
# to DIR/artifacts/TARGET/.  Each run gets a scratch directory of its own
# as TMPDIR (under FUZZ_TMPDIR, default /dev/shm when writable, else
# ${TMPDIR:-/tmp}), removed after it, so a run that libFuzzer ends after a
# crash leaves nothing behind.
#
# Then a table: target, seconds, executions, exec/s, coverage (cov: edges,
# ft: features, from libFuzzer's last status line), the working corpus
# (files and KiB) and crashes.  Exit status 0 when no target failed; 1 when
# one crashed (each artifact is named, with how to replay it) or could not
# run; 2 on a usage error.
set -u

usage() {
    echo "usage: fuzz/run.sh DIR SECONDS TARGET:MAX_LEN..." >&2
    exit 2
}
[ $# -ge 3 ] || usage
DIR=$1
SECS=$2
shift 2
case $SECS in
    '' | *[!0-9]*) echo "run.sh: FUZZ_SECONDS must be a whole number of seconds, not '$SECS'" >&2; exit 2 ;;
esac
[ "$SECS" -gt 0 ] || { echo "run.sh: FUZZ_SECONDS must be at least 1" >&2; exit 2; }
SRC=$(dirname "$0")

BASE=${FUZZ_TMPDIR:-}
if [ -z "$BASE" ]; then
    if [ -d /dev/shm ] && [ -w /dev/shm ]; then
        BASE=/dev/shm
    else
        BASE=${TMPDIR:-/tmp}
    fi
fi

mkdir -p "$DIR/logs" || exit 1
TABLE=$DIR/logs/summary
FAILS=$DIR/logs/failures
printf '%-9s %7s %11s %8s %6s %7s %15s %7s\n' target seconds executions \
    exec/s cov ft corpus crashes >"$TABLE"
: >"$FAILS"

# A run stopped from outside (^C) leaves no scratch directory behind.
scratch=
trap 'if [ -n "$scratch" ]; then rm -rf "$scratch"; fi' EXIT
trap 'exit 130' INT TERM

# field NAME LOG: the value of libFuzzer's final "stat::NAME:" line.
field() {
    sed -n "s/^stat::$1: *\([0-9]*\).*/\1/p" "$2" | tail -n 1
}

for spec in "$@"; do
    t=${spec%%:*}
    max=${spec#*:}
    bin=$DIR/$t
    log=$DIR/logs/$t.log
    corpus=$DIR/corpus/$t
    arts=$DIR/artifacts/$t
    if [ ! -x "$bin" ]; then
        echo "run.sh: $bin is not built (make fuzz-build)" >&2
        echo "$t: $bin is not built" >>"$FAILS"
        continue
    fi
    mkdir -p "$corpus" "$arts"
    cp "$SRC/corpus/$t/"* "$corpus/" || { echo "$t: no seed corpus in $SRC/corpus/$t" >>"$FAILS"; continue; }
    dict=
    [ -f "$SRC/$t.dict" ] && dict=-dict=$SRC/$t.dict
    scratch=$(mktemp -d "$BASE/ftrain-fuzz-run.XXXXXX") || exit 1
    echo "fuzz: $t for $SECS s (max_len $max, log $log)"
    start=$(date +%s)
    TMPDIR=$scratch UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$bin" -max_len="$max" -max_total_time="$SECS" -timeout=30 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$arts/" \
        ${dict:+"$dict"} "$corpus" >"$log" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    rm -rf "$scratch"
    scratch=

    execs=$(field number_of_executed_units "$log")
    rate=$(field average_exec_per_sec "$log")
    status=$(grep -a ' cov: ' "$log" | tail -n 1)
    cov=$(printf '%s\n' "$status" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
    ft=$(printf '%s\n' "$status" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
    files=$(find "$corpus" -type f | wc -l)
    kib=$(( ($(find "$corpus" -type f -exec cat {} + | wc -c) + 1023) / 1024 ))
    # Inputs that stop a run; slow-unit-* are only reports.
    found=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" |
            grep -E '/(crash|leak|timeout|oom)-' || true)
    crashes=$(printf '%s' "$found" | grep -c . || true)
    printf '%-9s %7s %11s %8s %6s %7s %15s %7s\n' "$t" "$took" "${execs:-?}" \
        "${rate:-?}" "${cov:-?}" "${ft:-?}" "$files ($kib KiB)" "$crashes" >>"$TABLE"
    if [ -n "$found" ]; then
        for a in $found; do
            echo "$t: $a (replay: $bin $a, or the gcc build: BUILD/fuzz/replay-$t $a)" >>"$FAILS"
        done
        grep -a -m 3 -E 'ERROR: |property failed|runtime error' "$log" |
            sed "s/^/$t:   /" >>"$FAILS"
    elif [ "$rc" -ne 0 ]; then
        echo "$t: exited $rc without an artifact: see $log" >>"$FAILS"
    fi
done

echo
echo "fuzz: $SECS s per target"
cat "$TABLE"
if [ -s "$FAILS" ]; then
    echo
    echo "fuzz: FAILED:"
    sed 's/^/  /' "$FAILS"
    exit 1
fi
echo "fuzz: no crash"
exit 0

#!/bin/sh
# fuzz_corpus.sh - the fuzz targets' seed corpus (fuzz/corpus/) as a
# regression test without clang or libFuzzer: each target's properties
# (listed at the top of fuzz/<target>.c) hold for every seed, and for
# damaged copies of every seed (bytes overwritten in the middle or at three
# quarters, the file cut in half), run through the replay driver that
# mk/fuzz.mk builds with the project's compiler ($BUILD/fuzz/replay-<target>,
# fuzz/replay.c).  A property that fails aborts the replay: a non-zero
# exit.  Also: the replays leave no scratch directory behind.
#
# Reads $BUILD (default build).  Skips when the replays are not built
# (make BUILD=... fuzz-replays).
. "$(dirname "$0")/../lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
TARGETS="manifest shard archive"
REPLAY_TIMEOUT=${REPLAY_TIMEOUT:-300}

for t in $TARGETS; do
    [ -x "$BUILD/fuzz/replay-$t" ] ||
        skip_all "$BUILD/fuzz/replay-$t not built (make BUILD=$BUILD fuzz-replays)"
    [ -d "$SRC/fuzz/corpus/$t" ] || { echo "Bail out! no fuzz/corpus/$t"; exit 1; }
done
plan 10

# spoil FILE AT: overwrite 8 bytes of FILE at offset AT with 0xff.
spoil() {
    printf '\377\377\377\377\377\377\377\377' |
        dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}

# replay TARGET PATH: the target's replay over PATH, output in $T/out,
# with the scratch directories under $T/tmp.
replay() {
    TMPDIR=$T/tmp timeout -k 5 "$REPLAY_TIMEOUT" "$BUILD/fuzz/replay-$1" "$2" \
        >"$T/out" 2>&1
}

mkdir -p "$T/tmp"
for t in $TARGETS; do
    seeds=$SRC/fuzz/corpus/$t
    n=$(find "$seeds" -type f | wc -l)
    replay "$t" "$seeds"
    rc=$?
    ok "$rc" "$t: every seed replays with its properties holding" ||
        why "exit $rc" "$(tail -n 20 "$T/out")"
    like "$(cat "$T/out")" "^replay: $n inputs " "$t: the replay ran all $n seeds"

    bad=$T/damaged-$t
    mkdir -p "$bad"
    for f in "$seeds"/*; do
        name=$(basename "$f")
        size=$(wc -c <"$f")
        cp "$f" "$bad/$name.mid" && spoil "$bad/$name.mid" $((size / 2))
        cp "$f" "$bad/$name.late" && spoil "$bad/$name.late" $((size * 3 / 4))
        head -c $((size / 2)) "$f" >"$bad/$name.half"
    done
    replay "$t" "$bad"
    rc=$?
    ok "$rc" "$t: damaged copies of the seeds replay without a crash or a broken property" ||
        why "exit $rc" "$(tail -n 20 "$T/out")"
done

left=$(find "$T/tmp" -mindepth 1 | head -n 3)
is "$left" "" "the replays removed their scratch directories"

done_testing

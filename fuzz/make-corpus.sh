#!/bin/sh
# make-corpus.sh - regenerate the seed corpus of the fuzz targets
# (fuzz/corpus/{manifest,shard,archive}/) from checkpoints that the library
# writes.  See docs/fuzz.md.
#
#   fuzz/make-corpus.sh [BUILD]
#
# BUILD (default build) must hold a gcc build of the project (`make
# BUILD=... all`): BUILD/ftrain, BUILD/ckptctl, BUILD/libckpt.a and
# BUILD/tests/tools/ckpt_mkfixture.  Needs cc and python3.
#
# Sources of the seeds (all small: a few KiB each):
#   line    ftrain --data line --layers 8 --steps 4 --ckpt-every 2: the
#           step-4 checkpoint (level 1: one byte-plane frame per shard), and
#           the same run's step 2 with --ckpt-level 0 (a stored frame)
#   frames  fuzz/mkseed.c: 1.6 KiB of tensors in 256-byte frames, as byte
#           planes, stored and plain zstd frames (seek tables of 7 entries)
#   world2  tests/tools/ckpt_mkfixture --world 2: a checkpoint of two shards
#
#   manifest/  line.json, line-no-checksum.json (manifest_xxh64 removed, as
#              older writers wrote them), frames.json, world2.json
#   shard/     line-planes.ftsh, line-stored.ftsh, frames-{planes,stored,
#              zstd}.ftsh, world2-1.ftsh
#   archive/   line.tar, line.tar.zst, world2.tar, world2.tar.zst, all from
#              `ckptctl export`
#
# Files named regress-* are inputs that once found a bug (docs/fuzz.md);
# they are kept.  Everything else in the three directories is replaced.
set -eu

BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/.." && pwd)
OUT=$HERE/corpus

for f in "$BUILD/ftrain" "$BUILD/ckptctl" "$BUILD/libckpt.a" \
         "$BUILD/tests/tools/ckpt_mkfixture"; do
    if [ ! -e "$f" ]; then
        echo "make-corpus.sh: $f is missing: run 'make BUILD=$BUILD all' first" >&2
        exit 1
    fi
done
command -v python3 >/dev/null 2>&1 || {
    echo "make-corpus.sh: python3 is needed (to drop manifest_xxh64)" >&2
    exit 1
}

T=$(mktemp -d "${TMPDIR:-/tmp}/make-corpus.XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM

step() { # step ROOT N: the step directory of step N under ROOT
    printf '%s/step-%08d' "$1" "$2"
}

# The small line fit, at level 1 and at level 0.
"$BUILD/ftrain" --device cpu --quiet --data line --layers 8 --steps 4 \
    --ckpt-every 2 --run-dir "$T/line" >"$T/log" 2>&1 ||
    { cat "$T/log" >&2; exit 1; }
"$BUILD/ftrain" --device cpu --quiet --data line --layers 8 --steps 2 \
    --ckpt-every 2 --ckpt-level 0 --run-dir "$T/line0" >"$T/log" 2>&1 ||
    { cat "$T/log" >&2; exit 1; }
LINE=$(step "$T/line/ckpt" 4)
LINE0=$(step "$T/line0/ckpt" 2)

# Small frames, and two shards.
cc -std=c11 -D_GNU_SOURCE -O2 -I"$TOP/include" "$HERE/mkseed.c" \
    "$BUILD/libckpt.a" -o "$T/mkseed" -lzstd -lxxhash -ljansson -larchive \
    -lpthread -lm
"$T/mkseed" "$T/frames"
"$BUILD/tests/tools/ckpt_mkfixture" "$T/world2" 7 --world 2 --mb 0 >/dev/null
WORLD2=$(step "$T/world2" 7)

for d in manifest shard archive; do
    mkdir -p "$OUT/$d"
    find "$OUT/$d" -type f ! -name 'regress-*' -exec rm -f {} +
done

cp "$LINE/manifest.json" "$OUT/manifest/line.json"
python3 - "$LINE/manifest.json" "$OUT/manifest/line-no-checksum.json" <<'EOF'
import json, sys
with open(sys.argv[1]) as f:
    m = json.load(f)
del m["manifest_xxh64"]
with open(sys.argv[2], "w") as f:
    json.dump(m, f, indent=1)
    f.write("\n")
EOF
cp "$(step "$T/frames" 1)/manifest.json" "$OUT/manifest/frames.json"
cp "$WORLD2/manifest.json" "$OUT/manifest/world2.json"

cp "$LINE/shard-0.ftsh" "$OUT/shard/line-planes.ftsh"
cp "$LINE0/shard-0.ftsh" "$OUT/shard/line-stored.ftsh"
cp "$(step "$T/frames" 1)/shard-0.ftsh" "$OUT/shard/frames-planes.ftsh"
cp "$(step "$T/frames" 2)/shard-0.ftsh" "$OUT/shard/frames-stored.ftsh"
cp "$(step "$T/frames" 3)/shard-0.ftsh" "$OUT/shard/frames-zstd.ftsh"
cp "$WORLD2/shard-1.ftsh" "$OUT/shard/world2-1.ftsh"

for a in line.tar line.tar.zst; do
    "$BUILD/ckptctl" export "$LINE" "$OUT/archive/$a" >/dev/null
done
for a in world2.tar world2.tar.zst; do
    "$BUILD/ckptctl" export "$WORLD2" "$OUT/archive/$a" >/dev/null
done

echo "make-corpus.sh: seeds in $OUT:"
for d in manifest shard archive; do
    printf '  %-9s %s files, %s bytes\n' "$d" \
        "$(find "$OUT/$d" -type f | wc -l)" \
        "$(find "$OUT/$d" -type f -exec cat {} + | wc -c)"
done

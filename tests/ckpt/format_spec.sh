#!/bin/sh
# format_spec.sh - docs/checkpoint-format.md is enough to read ftrain's
# checkpoints: tests/python/format_reader.py, a reader written from that
# document alone (Python's standard library, zstandard and xxhash; no code
# or library of ftrain's), reads real checkpoints and agrees with ftrain,
# ckptctl and the Python binding about every byte of them.
#
# 1. Checkpoints that ftrain writes on 1, 2 and 3 ranks: compressed (the
#    default: byte-plane frames, planes compressed or stored), stored
#    (--ckpt-level 0), and a state of 12.6 MiB so that frames are 4 MiB and
#    tensors span frames and shards.  The reader verifies them all (every
#    field rule, manifest_xxh64, header, footer, seek table, every frame and
#    the whole-file XXH64), as ckptctl verify does.
# 2. The tensors the reader reassembles equal ftrain's: their names, dtypes,
#    shapes, offsets and sizes are those of `ckptctl inspect --json`, their
#    bytes hash as the binding's (libftrain-ckpt) read_range gives them,
#    the model tensors hash to the param_hash of ftrain's done: line, and a
#    checkpoint saved by 1 rank and one saved by 3 at the same step of a
#    --deterministic run give the same tensors.  The reader's own re-encoding
#    of a checkpoint (written from the document: plain zstd, stored,
#    4-byte shuffle, byte planes, mixed; frames of 24 bytes; 5 shards;
#    700 shards, some empty) is verified by ckptctl, which finds its
#    tensors identical to the original and, with one byte of one element
#    changed, that element alone different.
# 3. The record fields (section 9) the reader parses equal those of
#    `ckptctl inspect --json`, and hold the documented relations (step,
#    optimizer.updates, schedule.update, samples_seen, world_size).
# 4. Damage: a byte of a frame, of a header's magic and version, of the
#    seek table, of the footer, of manifest.json, a value edited in a valid
#    manifest, a manifest of version 2, a truncated shard, a missing shard,
#    the same rank's shard of another step: the reader rejects each (with
#    the kind the document gives) and so does ckptctl verify (exit 1, with
#    the same error).  A
#    re-indented manifest with its keys reordered, and one without
#    manifest_xxh64 (an older writer's), are accepted by both.
# 5. One rule at a time: format_reader.py craft writes 50 checkpoints that
#    each break or stretch one rule (field rules, versions, checksums, frame
#    encodings, and section 2's layout, which readers do not require); the
#    reader and ckptctl verify --json give each the verdict its name says.
# 6. The node-local tier (section 10) on three fake nodes of one rank each
#    (SLURMD_NODENAME, --ckpt-local DIR/%n): each node's step holds the
#    whole manifest and 2 of the 3 shards; the reader verifies each node,
#    names the same missing shard as ckptctl verify --local, refuses to
#    read one node alone, reads the three together as the shared tier's
#    checkpoint of the same step, and rejects a damaged partner copy.
# 7. Through the binding (when numpy is there): every dtype, a scalar, an
#    empty tensor, frames of 64 bytes, level 0, shuffle off (plain zstd
#    frames), level 5: the reader's bytes are those of the arrays saved.
#
# Skips when $PYTHON (default /usr/bin/python3) lacks zstandard or xxhash
# (Debian: python3-zstandard python3-xxhash).
. "$(dirname "$0")/../lib.sh"
: "${FTRAIN_TIMEOUT:=90}"
need_mpi
CKPTCTL="$BUILD/ckptctl"
[ -x "$CKPTCTL" ] || skip_all "$CKPTCTL not built"
PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=$(command -v python3) || skip_all "no python3 (set PYTHON)"
"$PY" -c 'import zstandard, xxhash' 2>/dev/null ||
    skip_all "$PY lacks zstandard or xxhash (apt-get install python3-zstandard python3-xxhash)"
HERE=$(cd "$(dirname "$0")" && pwd)
READER="$HERE/../python/format_reader.py"
export PYTHONDONTWRITEBYTECODE=1
rd() { "$PY" "$READER" "$@"; }

plan 66

SMALL="--data line --layers 16 --global-batch 32 --micro-batch 8 --lr 0.01 --deterministic"
BIG="--data line --layers 1024,1024 --global-batch 32 --micro-batch 8 --lr 0.01 --deterministic"

# tensors FILE: the tensor lines of a dump without their hashes.
tensors() { sed -n 's/^\(tensor .*\) [0-9a-f]\{16\}$/\1/p' "$1"; }
# hashes FILE: the tensor lines of a dump.
hashes() { grep '^tensor ' "$1"; }

# insp CKPT: ckptctl inspect --json, in the reader's dump format, without
# tensor hashes: step, total_bytes, shards, tensors, record.
insp() {
    "$CKPTCTL" inspect --json "$1" 2>/dev/null | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
print("step %d" % d["step"])
print("total_bytes %d" % d["total_bytes"])
for s in d["shards"]:
    print("shard %d [%d,%d) frames %d file_bytes %d xxh64 %s" % (s["index"], s["raw_offset"],
          s["raw_offset"] + s["raw_bytes"], s["nframes"], s["file_bytes"], s["xxh64"]))
for t in d["tensors"]:
    print("tensor %s %s [%s] %d %d" % (t["name"], t["dtype"], ",".join(map(str, t["shape"])), t["offset"], t["nbytes"]))
def flat(p, v):
    if isinstance(v, dict):
        for k in sorted(v):
            flat(p + "." + k, v[k])
    else:
        print("%s %s" % (p, json.dumps(v, sort_keys=True, separators=(",", ":"))))
flat("record", d["record"])'
}
# dump_cmp FILE: FILE (a dump) without the tensor hashes, param_xxh64 and
# layout lines: what insp prints.
dump_cmp() {
    sed -e 's/^\(tensor .*\) [0-9a-f]\{16\}$/\1/' -e '/^param_xxh64 /d' -e '/^layout /d' "$1"
}

# bind CKPT: the binding's view: "tensor NAME DTYPE [SHAPE] OFFSET NBYTES
# XXH64" from libftrain-ckpt's read_range; empty without numpy/the library.
HAVE_BIND=0
case $BUILD in /*) _bdir=$BUILD ;; *) _bdir=$(pwd)/$BUILD ;; esac
if [ -f "$_bdir/libftrain-ckpt.so.2" ] && "$PY" -c 'import numpy' 2>/dev/null; then
    HAVE_BIND=1
    export FTRAIN_CKPT_LIB="$_bdir/libftrain-ckpt.so.2"
fi
bind() {
    PYTHONPATH="$HERE/../../python" "$PY" -c '
import sys, xxhash, ftrain_ckpt as fc
dt = {"float32": "f32", "float64": "f64", "int64": "i64", "int32": "i32", "uint8": "u8"}
with fc.Checkpoint(sys.argv[1]) as ck:
    for n, t in ck.tensors.items():
        b = ck.read_range(t.offset, t.nbytes) if t.nbytes else b""
        print("tensor %s %s [%s] %d %d %s" % (n, dt[str(t.dtype)], ",".join(map(str, t.shape)),
              t.offset, t.nbytes, xxhash.xxh64(bytes(b)).hexdigest()))' "$1"
}

# flip FILE OFFSET: invert the byte at OFFSET (negative: from the end).
flipat() {
    "$PY" -c '
import os, sys
p, o = sys.argv[1], int(sys.argv[2])
n = os.path.getsize(p)
o = o if o >= 0 else n + o
with open(p, "r+b") as f:
    f.seek(o); b = f.read(1); f.seek(o); f.write(bytes([b[0] ^ 0xFF]))' "$1" "$2"
}

# ---- 1. checkpoints of 1, 2 and 3 ranks ------------------------------------

mpi 1 $BIG --steps 4 --run-dir "$T/w1" --ckpt-every 2 >"$T/w1.out" 2>&1
rc1=$?
mpi 3 $BIG --steps 4 --run-dir "$T/w3" --ckpt-every 2 >"$T/w3.out" 2>&1
rc3=$?
mpi 2 $SMALL --steps 6 --run-dir "$T/w2" --ckpt-every 3 >"$T/w2.out" 2>&1
rc2=$?
mpi 2 $SMALL --steps 6 --run-dir "$T/s2" --ckpt-every 3 --ckpt-level 0 >"$T/s2.out" 2>&1
rcs=$?
is "$rc1 $rc3 $rc2 $rcs" "0 0 0 0" "ftrain saves on 1 and 3 ranks (12.6 MiB of state), 2 ranks (compressed) and 2 ranks (--ckpt-level 0)" ||
    why "$(tail -n 3 "$T/w1.out" "$T/w3.out" "$T/w2.out" "$T/s2.out")"

for r in w1 w3 w2 s2; do
    rd verify --strict "$T/$r/ckpt" >"$T/$r.v" 2>"$T/$r.verr"
    rc=$?
    "$CKPTCTL" verify "$T/$r/ckpt" >/dev/null 2>&1
    crc=$?
    is "$rc $crc $(grep -c ': ok (' "$T/$r.v")" "0 0 2" "$r: the reader verifies both steps (and section 2's layout), as ckptctl verify does" ||
        why "$(cat "$T/$r.v" "$T/$r.verr")"
done
C1="$T/w1/ckpt/step-00000004"
C3="$T/w3/ckpt/step-00000004"
C2="$T/w2/ckpt/step-00000006"
S2="$T/s2/ckpt/step-00000006"
like "$(grep step-00000004 "$T/w1.v")" "\(1 shards, 4 frames, flags 4," \
    "1 rank, 12.6 MiB: 4 frames of 4 MiB in byte planes, tensors spanning frames"
like "$(grep step-00000004 "$T/w3.v")" "\(3 shards, 6 frames, flags 4," \
    "3 ranks: 2 frames each, tensors spanning shards"
like "$(grep step-00000006 "$T/s2.v")" "\(2 shards, 2 frames, flags 2," "--ckpt-level 0: every frame stored (flag bit 1)"

# ---- 2. the tensors ----------------------------------------------------------

for c in "$C1" "$C3" "$C2" "$S2"; do
    n=$(basename "$(dirname "$(dirname "$c")")")
    rd dump "$c" >"$T/$n.dump" 2>"$T/$n.derr"
    insp "$c" >"$T/$n.insp"
    dump_cmp "$T/$n.dump" >"$T/$n.dcmp"
    cmp -s "$T/$n.dcmp" "$T/$n.insp" && [ -s "$T/$n.insp" ]
    ok $? "$n: step, total_bytes, shards, tensors (name, dtype, shape, offset, nbytes) and every record field are ckptctl inspect --json's" ||
        why "$(diff "$T/$n.dcmp" "$T/$n.insp" | head -n 20)" "$(cat "$T/$n.derr")"
    if [ "$HAVE_BIND" = 1 ]; then
        bind "$c" >"$T/$n.bind" 2>&1
        hashes "$T/$n.dump" >"$T/$n.hash"
        cmp -s "$T/$n.hash" "$T/$n.bind" && [ -s "$T/$n.bind" ]
        ok $? "$n: every tensor's bytes hash as libftrain-ckpt reads them" ||
            why "$(diff "$T/$n.hash" "$T/$n.bind" | head -n 10)"
    else
        skip "$n: every tensor's bytes hash as libftrain-ckpt reads them" "no numpy or $BUILD/libftrain-ckpt.so.2"
    fi
    is "$(sed -n 's/^param_xxh64 //p' "$T/$n.dump")" "$(hash_of "$T/$n.out")" \
        "$n: XXH64 of the model/ tensors' bytes is the param_hash of ftrain's done: line"
done
hashes "$T/w1.dump" >"$T/a" && hashes "$T/w3.dump" >"$T/b"
cmp -s "$T/a" "$T/b" && [ "$(wc -l <"$T/a")" -eq 18 ]
ok $? "the same step of a --deterministic run saved by 1 rank and by 3: the reader gives the same 18 tensors" ||
    why "$(diff "$T/a" "$T/b" | head)"
"$CKPTCTL" diff "$C1" "$C3" >/dev/null 2>&1
ok $? "... and ckptctl diff agrees"

# The reader's own encoding, from the document: ckptctl must read it.
mkdir "$T/re"
i=0
for spec in "zstd 24 5" "stored 24 3" "shuffle 24 1" "planes 40 2" "mixed 24 4" "mixed 1048576 5"; do
    set -- $spec
    i=$((i + 1))
    src=$C2
    [ "$2" -gt 1000 ] && src=$C1
    mkdir "$T/re/$i"
    d="$T/re/$i/$(basename "$src")"
    rd write "$src" "$d" --mode "$1" --frame-bytes "$2" --world "$3" >/dev/null 2>"$T/re.err"
    "$CKPTCTL" verify "$d" >"$T/re.v" 2>&1
    vrc=$?
    "$CKPTCTL" diff "$src" "$d" >"$T/re.d" 2>&1
    drc=$?
    mc=$("$CKPTCTL" inspect --json "$d" 2>/dev/null | sed -n 's/.*"manifest_checksum": "\([a-z]*\)".*/\1/p')
    is "$vrc $drc $mc" "0 0 verified" "written from the document ($1 frames of $2 bytes, $3 shards): ckptctl verifies it, checks its manifest_xxh64, finds the tensors identical" ||
        why "$(cat "$T/re.err" "$T/re.v")" "$(tail -n 2 "$T/re.d")"
done
mkdir "$T/re/empty"
d="$T/re/empty/$(basename "$C2")"
rd write "$C2" "$d" --world 700 --frame-bytes 64 >/dev/null 2>&1
"$CKPTCTL" verify "$d" >/dev/null 2>&1
vrc=$?
rd verify "$d" >/dev/null 2>&1
is "$vrc $? $(ls "$d" | grep -c ftsh)" "0 0 700" "596 bytes in 700 shards (104 empty: a header and a footer): ckptctl and the reader verify it"
mkdir "$T/re/poke"
d="$T/re/poke/$(basename "$C2")"
rd write "$C2" "$d" --mode planes --frame-bytes 40 --poke model/l1.weight:5 >/dev/null 2>&1
"$CKPTCTL" diff "$C2" "$d" >"$T/poke.d" 2>&1
like "$(grep -v '^identical' "$T/poke.d")" "^different +model/l1\.weight f32 \[1, 16\]: .* at element 5, .* 1 of 16 elements differ
different: 11 identical, 1 different" \
    "one byte of element 5 of model/l1.weight changed by the reader's writer: ckptctl diff finds that element alone"

# ---- 3. the record -----------------------------------------------------------

for n in w1 w3; do
    ws=$(sed -n 's/^record\.world_size //p' "$T/$n.dump")
    is "$ws" "$(sed -n 's/^shard \([0-9]*\) .*/\1/p' "$T/$n.dump" | wc -l | tr -d ' ')" \
        "$n: record.world_size is the number of shards"
done
r=$(sed -n -E 's/^record\.(step|optimizer\.updates|schedule\.update|epoch|cursor|samples_seen|steps_per_epoch|format|version|rng\.stream) //p' "$T/w2.dump" | tr '\n' ' ')
is "$r" "192 0 \"ftrain-state\" 6 0 192 6 6 32 1 " \
    "w2: cursor, epoch, format, optimizer.updates, rng.stream, samples_seen, schedule.update, step, steps_per_epoch, version as section 9 says for 6 steps of 32 of 1000 samples"
is "$(sed -n 's/^record\.root_id //p' "$T/w2.dump")" "\"$(head -c 16 "$T/w2/ckpt/.root-id")\"" \
    "record.root_id is the .root-id file's 16 hex digits (without its newline)"

# ---- 4. damage ---------------------------------------------------------------

# damage NAME CKPT: a copy of CKPT in $T/bad/NAME; DMG is its path.
damage() {
    mkdir -p "$T/bad/$1"
    DMG="$T/bad/$1/$(basename "$2")"
    cp -r "$2" "$DMG"
}
# ckptctl_kind CKPT: ckptctl verify --json's verdict on CKPT in the
# reader's words: ok, format (malformed manifest, CKPT_EFORMAT), corrupt
# (CKPT_ECORRUPT), version (CKPT_EVERSION), incomplete.
ckptctl_kind() {
    "$CKPTCTL" verify --json "$1" 2>/dev/null | "$PY" -c '
import json, sys
c = json.load(sys.stdin)["checkpoints"][0]
e = {None: "ok", "malformed manifest": "format", "checksum mismatch or corrupt data": "corrupt",
     "unsupported format version": "version"}.get(c["error"], c["error"])
print("incomplete" if c["status"] == "incomplete" else e)'
}
# reader_kind CKPT [--local]: the reader's verdict (ok or the kind it names).
reader_kind() {
    rd verify "$@" >/dev/null 2>"$T/rk.err" && { echo ok; return; }
    sed -n -E 's/^format_reader: [^:]*: (format|corrupt|version|incomplete|layout): .*/\1/p' "$T/rk.err" | head -n 1
}
# rejected NAME KIND: the reader rejects $DMG saying KIND (as the document
# says: section 3 CKPT_EFORMAT, 5 CKPT_ECORRUPT / CKPT_EINCOMPLETE, 7
# CKPT_EVERSION), and ckptctl verify exits 1 with the same error.
rejected() {
    _r=$(reader_kind "$DMG")
    "$CKPTCTL" verify "$DMG" >/dev/null 2>&1
    _x=$?
    _c="$(ckptctl_kind "$DMG") exit $_x"
    is "$_r | $_c" "$2 | $2 exit 1" "$1: the reader says $2, ckptctl verify exits 1 saying the same" ||
        why "reader: $(cat "$T/rk.err")"
}
accepted() {
    rd verify "$DMG" >/dev/null 2>"$T/rej.err"
    _r=$?
    "$CKPTCTL" verify "$DMG" >"$T/rej.c" 2>&1
    is "$_r $?" "0 0" "$1: accepted by the reader and by ckptctl verify" || why "$(cat "$T/rej.err" "$T/rej.c")"
}
# manifest_edit CKPT INDENT SORT PYTHON: rewrite CKPT's manifest.json
# (indented by INDENT, keys sorted when SORT is True) after PYTHON edits m.
manifest_edit() {
    PYTHONPATH="$HERE/../python" "$PY" -c '
import json, sys, format_reader as fr
p = sys.argv[1] + "/manifest.json"
m = json.load(open(p))
exec(sys.argv[4])
open(p, "w").write(json.dumps(m, indent=int(sys.argv[2]), sort_keys=sys.argv[3] == "True"))' "$1" "$2" "$3" "$4"
}

damage frame "$C2"
flipat "$DMG/shard-1.ftsh" 30
rejected "a byte of shard 1's frame" corrupt
damage magic "$C2"
flipat "$DMG/shard-0.ftsh" 3
rejected "a byte of shard 0's header magic" corrupt
damage hver "$C2"
flipat "$DMG/shard-0.ftsh" 8
rejected "shard 0's header version (254)" version
damage table "$C1"
flipat "$DMG/shard-0.ftsh" -80
rejected "a byte of the seek table (frame 3's raw_size)" corrupt
damage footer "$C3"
flipat "$DMG/shard-2.ftsh" -40
rejected "a byte of shard 2's footer (nframes)" corrupt
damage trunc "$C3"
truncate -s -1 "$DMG/shard-1.ftsh"
rejected "shard 1 truncated by one byte" corrupt
damage missing "$C3"
rm "$DMG/shard-1.ftsh"
rejected "shard 1 missing" incomplete
damage mflip "$C2"
"$PY" -c '
import sys
p = sys.argv[1] + "/manifest.json"
b = bytearray(open(p, "rb").read())
i = b.index(b"\"file_bytes\": ") + len("\"file_bytes\": ")
b[i] = ord("1") if b[i] != ord("1") else ord("2")
open(p, "wb").write(b)' "$DMG"
rejected "a digit of shard 0's file_bytes in manifest.json" corrupt
damage mvalue "$C2"
manifest_edit "$DMG" 1 False 'm["record"]["cursor"] += 32'
rejected "the record's cursor edited (manifest_xxh64 no longer matches)" corrupt
damage mversion "$C2"
manifest_edit "$DMG" 1 False 'm["version"] = 2; del m["manifest_xxh64"]; m["manifest_xxh64"] = fr.hexd(fr.h64(fr.canonical(m).encode()))'
rejected "manifest version 2 (with its checksum recomputed)" version
damage stale "$S2"
cp "$T/s2/ckpt/step-00000003/shard-0.ftsh" "$DMG/shard-0.ftsh"
is "$(wc -c <"$DMG/shard-0.ftsh")" "$(wc -c <"$S2/shard-0.ftsh")" "stored shards of steps 3 and 6 have the same size"
rejected "step 3's shard 0 in step 6 (same size)" corrupt
damage reindent "$C2"
manifest_edit "$DMG" 4 True 'pass'
accepted "manifest.json re-indented, its keys sorted"
damage old "$C2"
manifest_edit "$DMG" 1 False 'del m["manifest_xxh64"]'
accepted "manifest.json without manifest_xxh64 (an older writer's)"

# ---- 5. one rule at a time ------------------------------------------------------

# format_reader.py craft: checkpoints that each break or stretch one rule;
# the directory name says what the document makes of it.  The reader and
# ckptctl verify must both give that verdict.
rd craft "$C2" "$T/craft" >"$T/craft.list" 2>&1
is "$(wc -l <"$T/craft.list" | tr -d ' ')" 50 "format_reader.py craft makes 50 checkpoints, one rule each" ||
    why "$(tail -n 5 "$T/craft.list")"
# The reader verifies all 50 in one process (each path it is given: "PATH:
# ok (...)" on stdout, or "format_reader: PATH: KIND: ..." on stderr, as
# reader_kind reads it for one), and one Python reads ckptctl verify
# --json's 50 verdicts as ckptctl_kind does: 150 Python start-ups fewer.
paths=""
for d in $(cat "$T/craft.list"); do
    paths="$paths $T/craft/$d/$(basename "$C2")"
    "$CKPTCTL" verify --json "$T/craft/$d/$(basename "$C2")" >"$T/craft/$d.json" 2>/dev/null
done
# shellcheck disable=SC2086 # the paths hold no blanks
rd verify $paths >"$T/craft.rd" 2>"$T/craft.rd.err"
"$PY" - "$T/craft" "$T/craft.list" "$(basename "$C2")" >"$T/craft.kinds" 2>&1 <<'PY'
import json, re, sys
root, names, base = sys.argv[1], open(sys.argv[2]).read().split(), sys.argv[3]
out = open(root + ".rd").read().splitlines()
err = open(root + ".rd.err").read().splitlines()
kinds = {None: "ok", "malformed manifest": "format", "checksum mismatch or corrupt data": "corrupt",
         "unsupported format version": "version"}
for d in names:
    c = "%s/%s/%s" % (root, d, base)
    if any(l.startswith(c + ": ok (") for l in out):
        rk = "ok"
    else:
        rk = "?"
        for l in err:
            m = re.match(re.escape("format_reader: " + c) + r": (format|corrupt|version|incomplete|layout): ", l)
            if m:
                rk = m.group(1)
                break
    try:
        v = json.load(open("%s/%s.json" % (root, d)))["checkpoints"][0]
        ck = "incomplete" if v["status"] == "incomplete" else kinds.get(v["error"], v["error"])
    except (ValueError, KeyError, IndexError):
        ck = "?"
    print(d, rk, str(ck).replace(" ", "_"))
PY
bad_r="" bad_c=""
while read -r d rk ck; do
    want=${d%%-*}
    [ "$rk" = "$want" ] || bad_r="$bad_r $d:$rk"
    [ "$ck" = "$want" ] || bad_c="$bad_c $d:$ck"
done <"$T/craft.kinds"
[ "$(wc -l <"$T/craft.kinds")" -eq 50 ] || bad_r="$bad_r (verdicts: $(tail -n 3 "$T/craft.kinds"))"
is "$bad_r" "" "the reader's verdict on each is the document's (ok, format, corrupt, version)"
is "$bad_c" "" "ckptctl verify's verdict on each is the same"
is "$(reader_kind --strict "$T/craft/ok-offset-not-8-aligned/$(basename "$C2")") $(reader_kind --strict "$T/craft/ok-uneven-shards-first-empty/$(basename "$C2")")" \
    "layout layout" "a tensor off section 2's 8-byte grid, shards off its floor(i*T/W) split: readers accept them, --strict names the layout"

# ---- 6. the node-local tier ------------------------------------------------------

L="$T/local"
LOC="$SMALL --steps 12 --run-dir $T/lr --ckpt-every 4 --ckpt-local $L/%n --ckpt-local-every 4 --log-every 1 --step-delay-ms 40"
timeout -k 5 "$FTRAIN_TIMEOUT" sh "$LAUNCH" mpirun --oversubscribe \
    -n 1 -x SLURMD_NODENAME=a "$FTRAIN" --device cpu $LOC : \
    -n 1 -x SLURMD_NODENAME=b "$FTRAIN" --device cpu $LOC : \
    -n 1 -x SLURMD_NODENAME=c "$FTRAIN" --device cpu $LOC >"$T/lr.out" 2>&1
is "$? $(ls -d "$L"/a/step-00000004 "$L"/b/step-00000004 "$L"/c/step-00000004 2>/dev/null | wc -l)" "0 3" \
    "3 fake nodes of one rank each: every node sealed step 4" || why "$(tail -n 5 "$T/lr.out")"
all_missing=""
for n in a b c; do
    rd verify --local "$L/$n" >"$T/l$n.v" 2>&1
    rc=$?
    "$CKPTCTL" verify --local "$L/$n" >"$T/l$n.c" 2>&1
    crc=$?
    mine=$(sed -n 's/.*step-00000004: ok (.*missing: \([0-9,]*\))$/\1/p' "$T/l$n.v")
    theirs=$(sed -n 's/^step-00000004: ok (2 of 3 shards present; missing: \([0-9, ]*\);.*/\1/p' "$T/l$n.c" | tr -d ' ')
    all_missing="$all_missing$mine"
    is "$rc $crc $(grep -c '2 of 3 shards present' "$T/l$n.v") $mine" "0 0 2 $theirs" \
        "node $n: the reader verifies steps 4 and 8 with 2 of 3 shards present, missing the one ckptctl verify --local names" ||
        why "$(cat "$T/l$n.v" "$T/l$n.c")"
done
is "$(printf '%s' "$all_missing" | fold -w1 | sort | tr -d '\n')" "012" "each shard is missing on exactly one node"
rd dump --local "$L/a/step-00000004" >/dev/null 2>"$T/la.err"
rc=$?
like "$rc $(cat "$T/la.err")" "^1 .*incomplete: shard-[0-9]\.ftsh is held by no directory" "one node alone: incomplete, naming the shard"
rd dump --local "$L/a/step-00000004" "$L/b/step-00000004" "$L/c/step-00000004" >"$T/lall.dump" 2>"$T/lall.err"
rc=$?
rd dump "$T/lr/ckpt/step-00000004" >"$T/lsh.dump" 2>&1
hashes "$T/lall.dump" >"$T/a"
hashes "$T/lsh.dump" >"$T/b"
cmp -s "$T/a" "$T/b" && [ "$rc" = 0 ] && [ -s "$T/a" ]
ok $? "the three nodes' step 4 read together (manifests agreeing): the shared tier's step 4 tensors" ||
    why "$(cat "$T/lall.err")" "$(diff "$T/a" "$T/b" | head)"
grep -v -e '^record\.run_seconds ' -e '^record\.saved_at ' -e '^shard ' "$T/lall.dump" >"$T/a"
grep -v -e '^record\.run_seconds ' -e '^record\.saved_at ' -e '^shard ' "$T/lsh.dump" >"$T/b"
cmp -s "$T/a" "$T/b"
ok $? "... and its record, but for run_seconds and saved_at (another save)" || why "$(diff "$T/a" "$T/b" | head)"
# a's partner copy (the shard node a holds of another node's rank)
pc=$(ls "$L/a/step-00000004" | grep ftsh | grep -v '^shard-0\.ftsh$' | head -n 1)
flipat "$L/a/step-00000004/$pc" 40
rd verify --local "$L/a/step-00000004" >/dev/null 2>"$T/lbad.err"
rc=$?
"$CKPTCTL" verify --local "$L/a/step-00000004" >/dev/null 2>&1
is "$rc $? $(grep -c ': corrupt: ' "$T/lbad.err")" "1 1 1" "a damaged partner copy ($pc on node a): the reader and ckptctl verify --local reject it"

# ---- 7. through the binding: every dtype, tiny frames, plain zstd frames -------

if [ "$HAVE_BIND" = 1 ]; then
    PYTHONPATH="$HERE/../../python" "$PY" -c '
import sys, numpy as np, xxhash, ftrain_ckpt as fc
rng = np.random.default_rng(1)
t = {"a/f32": rng.standard_normal((37, 5)).astype(np.float32),
     "b/u8": rng.integers(0, 255, (13,), dtype=np.uint8),
     "c/f64": rng.standard_normal((3, 4, 5)),
     "d/i64": np.arange(-20, 21, dtype=np.int64),
     "e/i32": rng.integers(-1000, 1000, (7, 3, 2, 2), dtype=np.int32),
     "f/scalar": np.array(3.5, dtype=np.float32),
     "g/empty": np.zeros((0, 4), dtype=np.float32),
     "h/big": (rng.standard_normal(5000) * 0.01).astype(np.float32)}
dt = {"float32": "f32", "float64": "f64", "int64": "i64", "int32": "i32", "uint8": "u8"}
for i, kw in enumerate([dict(frame_bytes=64), dict(level=0, frame_bytes=100),
                        dict(shuffle=False, frame_bytes=256), dict(level=5)]):
    p = fc.save(sys.argv[1] + "/p%d" % i, 7, t, record={"epoch": 1, "s": "\u001f\u00e9", "r": [1e-05, 0.1, 1e20]}, **kw)
    with fc.Checkpoint(p) as ck, open(sys.argv[1] + "/p%d.want" % i, "w") as f:
        for n, a in t.items():
            ti = ck.tensors[n]
            f.write("tensor %s %s [%s] %d %d %s\n" % (n, dt[str(a.dtype)], ",".join(map(str, a.shape)),
                    ti.offset, ti.nbytes, xxhash.xxh64(a.tobytes()).hexdigest()))' "$T" >"$T/py.out" 2>&1
    ok $? "the binding saves 8 tensors of every dtype four ways" || why "$(cat "$T/py.out")"
    i=0
    for what in "frames of 64 bytes" "level 0, frames of 100 bytes" "shuffle off: plain zstd frames of 256 bytes" "level 5"; do
        rd verify "$T/p$i" >"$T/p$i.v" 2>&1 && rd dump "$T/p$i/step-00000007" >"$T/p$i.dump" 2>&1
        hashes "$T/p$i.dump" >"$T/a"
        cmp -s "$T/a" "$T/p$i.want"
        ok $? "binding, $what: the reader verifies it and gives the bytes of the arrays saved ($(sed 's/.*(\(.*\))/\1/' "$T/p$i.v"))" ||
            why "$(cat "$T/p$i.v")" "$(diff "$T/a" "$T/p$i.want" | head)"
        i=$((i + 1))
    done
else
    for i in 1 2 3 4 5; do skip "binding case $i" "no numpy or $BUILD/libftrain-ckpt.so.2"; done
fi

done_testing

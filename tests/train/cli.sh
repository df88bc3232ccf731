#!/bin/sh
# cli.sh - ftrain's command line: usage errors exit 2 and name the option on
# stderr; --help lists every option the parser accepts (checked against the
# option table in src/config/config_table.c, both ways); --version; data files that are
# missing or truncated exit 1 naming the file (on several ranks, said once).
#
# Option errors are found before MPI starts, so these runs need no launcher.
# Every refusal of config_parse() (every row's garbage, range, missing
# value, value given to a flag, unknown name, and every conflict of
# config_check) is checked in-process, row by row, by
# tests/config/config_parse.c, and main() turns any of them into the same
# "ftrain: MESSAGE" on stderr, nothing on stdout and exit 2
# (parse_options in src/app/main.c).  So this file runs the binary on one
# example of each way through that path (an unknown option, a missing
# value, a value given to a flag, a stray argument, a short option, a bad
# number, an unknown name, a conflict, the local tier against the shared
# root), and on the messages config_parse.c does not check ("did you mean
# --help", an unknown long option's name): each ftrain process costs half
# a second of CPU here (its CUDA libraries' start-up), and the ~115 other
# examples it ran took most of this file's two minutes.
. "$(dirname "$0")/../lib.sh"
[ -x "$FTRAIN" ] || skip_all "$FTRAIN not built (make $FTRAIN)"
SRC_CONFIG="$(dirname "$0")/../../src/config/config_table.c"
SRC_VERSION="$(dirname "$0")/../../include/ftrain/version.h"

# bad NAME WORD ARGS...: ftrain ARGS exits 2, says nothing on stdout, and its
# stderr contains WORD (the option at fault).
bad() {
    _name=$1 _word=$2
    shift 2
    # Bounded: should a bad option be accepted, the run must not go on long.
    timeout -k 2 20 "$FTRAIN" "$@" >"$T/out" 2>"$T/err"
    _rc=$?
    _err=$(cat "$T/err")
    if [ "$_rc" -eq 2 ] && [ ! -s "$T/out" ] && printf '%s' "$_err" | grep -qF -- "$_word"; then
        ok 0 "$_name: exit 2, stderr names $_word"
    else
        ok 1 "$_name: exit 2, stderr names $_word"
        why "args: $*" "exit $_rc" "stderr: $_err" "stdout: $(head -c 300 "$T/out")"
    fi
}

L="--data line"
bad "unknown option" --bogus --bogus
bad "unknown option after good ones" --frobnicate $L --steps 3 --frobnicate
bad "missing value at the end" --lr $L --lr
bad "missing value names the option" "'--data' needs a value" --data
bad "a value given to a flag names the flag" "'--quiet' takes no value" --quiet=1
bad "stray argument" extra $L extra
bad "a short option in a cluster is named, not the word before it" "'-x'" $L -xy
bad "-h points to --help" "did you mean --help" -h
bad "--lr nan" --lr $L --lr nan
bad "unknown --init" "--init: expected torch, kaiming or xavier, got 'bogus'" --init bogus
bad "--epochs with --steps" --epochs --epochs 2 --steps 5
bad "--steps with --epochs" --steps --steps 5 --epochs 2
bad "--ckpt-keep without --run-dir" "--ckpt-keep needs --run-dir" $L --steps 3 --ckpt-keep 5
# --ckpt-local at, inside or around the shared root RUN_DIR/ckpt: the two
# tiers would prune each other's checkpoints.  Refused before anything is
# made.
LT="$L --steps 30 --ckpt-local-every 2 --ckpt-every 5"
bad "--ckpt-local at the shared root" "is the shared checkpoint root '$T/lt/ckpt'" $LT \
    --run-dir "$T/lt" --ckpt-local "$T/lt/ckpt"
bad "--ckpt-local inside the shared root, per node" "lies inside the shared checkpoint root" \
    $LT --run-dir "$T/lt" --ckpt-local "$T/lt/ckpt/%n"
bad "--ckpt-local holding the shared root" "contains the shared checkpoint root" $LT \
    --run-dir "$T/lt" --ckpt-local "$T/lt"
ok "$([ ! -e "$T/lt" ]; echo $?)" "  those refusals made nothing"

# A usage error points at --help.
"$FTRAIN" --bogus 2>"$T/err" >/dev/null
like "$(cat "$T/err")" "--help" "a usage error points the user at --help"

# --help: exit 0, on stdout only.
"$FTRAIN" --help >"$T/help" 2>"$T/err"
is "$?" 0 "--help exits 0"
ok "$([ -s "$T/help" ] && [ ! -s "$T/err" ]; echo $?)" "--help writes to stdout, nothing to stderr"
like "$(head -n 1 "$T/help")" "^usage: ftrain" "--help starts with a usage line"
like "$(tr '\n' ' ' <"$T/help")" "exit codes:.*0.*75.*2.*1" "--help documents the exit codes"
like "$(tr '\n' ' ' <"$T/help")" "exit codes:.* 76 a hang" "--help's exit codes include 76 (a hang)"
# The man page and --help describe --quiet alike.
quiet_help=$(sed -n '/--quiet/,/^  --/p' "$T/help" | tr -s ' \n' '  ')
like "$quiet_help" "resume, recovery, stop and summary" "--help: --quiet keeps resume, recovery, stop, done"
MAN="$(dirname "$0")/../../man/ftrain.1"
like "$(sed -n '/^\.B \\-\\-quiet/,/^\.TP/p' "$MAN")" "resume, recovery, stop and summary" \
    "man/ftrain.1: --quiet says the same"

# Golden consistency: the long options of the parser's table (src/config/config_table.c,
# between 'config_opts[] = {' and '};') and the options --help names.
if [ -r "$SRC_CONFIG" ]; then
    sed -n '/config_opts\[\] *= *{/,/^};/p' "$SRC_CONFIG" |
        sed -n 's/^[[:space:]]*{"\([a-z0-9-]*\)",.*/\1/p' | sort -u >"$T/table"
    n=$(wc -l <"$T/table")
    ok "$([ "$n" -ge 20 ]; echo $?)" "found the option table in src/config/config_table.c ($n options)"
    missing=""
    while read -r o; do
        grep -Eq -- "--$o([^a-z0-9-]|\$)" "$T/help" || missing="$missing --$o"
    done <"$T/table"
    is "$missing" "" "--help lists every option the parser accepts"
    # Options are the --words on the help's option lines (indented, starting
    # with --), not the launcher examples at the top.
    grep -E '^ +--' "$T/help" | grep -Eo -- '--[a-z][a-z0-9-]+' | sed 's/^--//' | sort -u >"$T/helped"
    extra=$(comm -13 "$T/table" "$T/helped" | tr '\n' ' ')
    is "$extra" "" "every option --help names is in the parser's table"
    # That each option of the table really parses (not "unknown option"):
    # tests/config/config_parse.c parses every row through the same
    # config_parse_options() with a valid value ("--NAME has a hand-written
    # check above").
else
    skip "help vs option table" "src/config/config_table.c not found"
    skip "help lists parser options" "src/config/config_table.c not found"
    skip "help options are parsed" "src/config/config_table.c not found"
fi

# --version: exit 0 on stdout, and names the version from the header.
"$FTRAIN" --version >"$T/ver" 2>"$T/err"
is "$?" 0 "--version exits 0"
want=$(sed -n 's/^#define FTRAIN_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' "$SRC_VERSION" 2>/dev/null |
    paste -sd. -)
like "$(cat "$T/ver")" "^ftrain $want" "--version names ftrain $want"
ok "$([ ! -s "$T/err" ]; echo $?)" "--version writes nothing to stderr"
# --help among otherwise valid options still only prints the help.
"$FTRAIN" $L --steps 3 --help >/dev/null 2>&1
is "$?" 0 "--help after valid options exits 0"

# Data files: missing and truncated.  These start MPI as a singleton.
mkdir -p "$T/empty" "$T/trunc"
"$FTRAIN" --data-dir "$T/empty" --steps 1 --quiet >"$T/out" 2>"$T/err"
rc=$?
is "$rc" 1 "a missing data directory exits 1"
like "$(cat "$T/err")" "$T/empty/[a-z0-9-]+\\.gz" "the message names the missing file"
# The same failure on every rank is said once, by rank 0.
if command -v mpirun >/dev/null 2>&1; then
    mpi 3 --data fashion-mnist --data-dir "$T/no-such-dir" --steps 2 >"$T/same.out" 2>"$T/same.err"
    rc=$?
    ok "$([ "$rc" -eq 1 ] && [ "$(grep -c '^ftrain: rank' "$T/same.err")" -eq 1 ] &&
        grep -q '^ftrain: rank 0: .*no-such-dir' "$T/same.err"; echo $?)" \
        "the same error on 3 ranks is printed once, by rank 0 (exit $rc)" || why "$(cat "$T/same.err")"
else
    skip "the same error on 3 ranks is printed once" "mpirun not installed"
fi
FM=/usr/share/datasets/fashion-mnist
if [ -r "$FM/train-images-idx3-ubyte.gz" ]; then
    head -c 100000 "$FM/train-images-idx3-ubyte.gz" >"$T/trunc/train-images-idx3-ubyte.gz"
    for f in train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
        ln -s "$FM/$f" "$T/trunc/$f"
    done
    "$FTRAIN" --data-dir "$T/trunc" --steps 1 --quiet >"$T/out" 2>"$T/err"
    rc=$?
    is "$rc" 1 "a truncated train-images .gz exits 1"
    like "$(cat "$T/err")" "$T/trunc/train-images-idx3-ubyte.gz: .*trunc" \
        "the message names the truncated file and says truncated"
    ok "$(grep -q '^done:' "$T/out"; [ $? -ne 0 ]; echo $?)" "no training happened"
else
    skip "truncated data" "fashion-mnist is not installed in $FM"
    skip "truncated data message" "fashion-mnist is not installed in $FM"
    skip "truncated data no training" "fashion-mnist is not installed in $FM"
fi

# --ckpt-buffered writes through the page cache: a checkpoint with the same
# tensors as the default (O_DIRECT) one, and it verifies.
"$FTRAIN" $L --steps 6 --run-dir "$T/rd" --quiet >"$T/out" 2>"$T/err"
is "$?" 0 "a run saving with O_DIRECT (the default) exits 0"
"$FTRAIN" $L --steps 6 --run-dir "$T/rb" --ckpt-buffered --quiet >"$T/out" 2>"$T/err"
is "$?" 0 "a run with --ckpt-buffered exits 0"
"$BUILD/ckptctl" verify "$T/rb/ckpt" >"$T/out" 2>&1
is "$?" 0 "its checkpoint verifies"
"$BUILD/ckptctl" diff "$T/rd/ckpt" "$T/rb/ckpt" >"$T/out" 2>&1
is "$?" 0 "and holds the same tensors as the O_DIRECT one (ckptctl diff)"

# --ckpt-no-adapt: every frame compressed, so two runs write the same bytes.
"$FTRAIN" $L --steps 6 --run-dir "$T/na1" --ckpt-no-adapt --quiet >"$T/out" 2>"$T/err"
is "$?" 0 "a run with --ckpt-no-adapt exits 0"
"$FTRAIN" $L --steps 6 --run-dir "$T/na2" --ckpt-no-adapt --quiet >"$T/out" 2>"$T/err"
cmp -s "$T/na1/ckpt/step-00000006/shard-0.ftsh" "$T/na2/ckpt/step-00000006/shard-0.ftsh"
is "$?" 0 "two --ckpt-no-adapt runs wrote byte-identical shards"
"$BUILD/ckptctl" diff "$T/rd/ckpt" "$T/na1/ckpt" >"$T/out" 2>&1
is "$?" 0 "with the same tensors as the default run (ckptctl diff)"

# The thread budget follows the CPU affinity (taskset, mpirun's binding,
# SLURM cpusets), not the node's core count: the "world:" lines show each
# rank's cores and the "train:" line its BLAS threads.
ncpu=$(nproc)
"$FTRAIN" $L --steps 1 >"$T/out" 2>"$T/err"
like "$(cat "$T/out")" "world: rank 0 .* cores $ncpu" "an unbound run gets all $ncpu cores"
if [ "$ncpu" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
    cpu=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*\([0-9]*\).*/\1/p' /proc/self/status)
    taskset -c "$cpu" "$FTRAIN" $L --steps 1 >"$T/out" 2>"$T/err"
    like "$(cat "$T/out")" "world: rank 0 .* cores 1" "a run pinned to one CPU by taskset gets 1 core"
    like "$(cat "$T/out")" " 1 BLAS thread per rank" "and runs 1 BLAS thread, not $ncpu"
    timeout -k 5 "$FTRAIN_TIMEOUT" sh "$LAUNCH" mpirun --bind-to core -n 1 "$FTRAIN" $L --steps 1 >"$T/out" 2>"$T/err"
    like "$(cat "$T/out")" "world: rank 0 .* cores 1" "a rank that mpirun binds to a core gets 1 core"
    mpi 2 $L --steps 1 >"$T/out" 2>"$T/err"
    half=$((ncpu / 2))
    like "$(cat "$T/out")" "world: rank 1 .* cores $half" "two unbound ranks share the $ncpu cores: $half each"
else
    for n in 1 2 3 4; do
        skip "affinity case $n" "needs taskset and 2 or more CPUs (have $ncpu)"
    done
fi

# The timing line: samples/s leaves out the evaluations and, when more than
# one step ran, the first step (both printed beside it).  With every step
# held 200 ms by --step-delay-ms, samples/s is the batch per 200 ms whether
# or not the first step is counted, so the figure shows whether the steps
# and the time left out are the same ones: leaving out the first step's
# time but not its samples gives 60, the other way round 42.
"$FTRAIN" --data line --layers 4 --steps 1 >"$T/out" 2>"$T/err"
t1=$(grep '^timing:' "$T/out")
like "$t1" "evaluation [0-9.]+ s \(not in samples/s\)\$" "one step: it is in samples/s (the line says only the evaluation is not)"
"$FTRAIN" --data line --layers 4 --global-batch 10 --micro-batch 10 --steps 6 \
    --step-delay-ms 200 >"$T/out" 2>"$T/err"
t6=$(grep '^timing:' "$T/out")
like "$t6" "evaluation [0-9.]+ s, first step [0-9.]+ s \(neither in samples/s\)\$" \
    "six steps: the line gives the first step's time and leaves it out"
sps=$(printf '%s\n' "$t6" | sed -n 's/^timing: \([0-9.]*\) samples.*/\1/p')
ok "$(awk -v s="${sps:-0}" 'BEGIN { exit !(s > 44 && s < 56) }'; echo $?)" \
    "six steps of 10 samples held 200 ms each: ${sps:-?} samples/s, about 10 / 0.200 (44-56)"

# A stopped run's samples/s leaves out the stop's save: here the fsync of
# its shard is held 2 s (the stallio shim), which counted would bring about
# 60 samples over 3.2 s (under 30 samples/s); left out, the steps' own 200
# ms each give about 50 (more: the stop's steps are cut short).
if ! command -v mpirun >/dev/null 2>&1; then
    SHIM_WHY="mpirun not installed"
elif have_shim stallio; then
    : >"$T/st.out"
    timeout -k 5 60 sh "$LAUNCH" mpirun --oversubscribe -n 1 -x LD_PRELOAD="$SHIM" -x STALLIO_RANK=0 \
        -x STALLIO_OP=fsync -x STALLIO_SECONDS=2 -x STALLIO_MARK="$T/st.mark" \
        "$FTRAIN" --device cpu --data line --layers 4 --global-batch 10 --micro-batch 10 \
        --steps 1000 --step-delay-ms 200 --run-dir "$T/st" >>"$T/st.out" 2>&1 &
    st_pid=$!
    track_bg "$st_pid"
    wait_for 30 grep -q '^world: rank 0 ' "$T/st.out"
    sleep 1.2
    kill -USR1 "$(rank_pid "$T/st.out" 0)" 2>/dev/null
    wait "$st_pid"
    is "$?" 75 "a stop whose save's fsync is held 2 s: exit 75"
    ok "$([ -s "$T/st.mark" ]; echo $?)" "the stop's save was held in its fsync"
    sps=$(sed -n 's/^timing: \([0-9.]*\) samples.*/\1/p' "$T/st.out")
    ok "$(awk -v s="${sps:-0}" 'BEGIN { exit !(s > 40 && s < 100) }'; echo $?)" \
        "its samples/s (${sps:-?}) leaves the stop's save out (40-100; under 30 with it)" ||
        why "$(tail -n 5 "$T/st.out")"
fi
if [ -n "$SHIM_WHY" ]; then
    for n in 1 2 3; do
        skip "stopped run's samples/s case $n" "$SHIM_WHY"
    done
fi

done_testing

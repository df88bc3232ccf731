#!/bin/sh
# plot.sh - ftrain-plot (scripts/ftrain-plot) on real run directories, and
# its refusals.
#
# A run of 60 steps is stopped by SIGUSR1 on 2 ranks, resumed on 3 ranks and
# stopped again, and finished on 1: its SVG parses as XML (xml.etree), has
# one stop marker per stop event of metrics.jsonl at its step, one segment
# label per start event with that launch's world size, and one polyline
# with a point per step line.  A world of one killed by --fault and
# relaunched gets one unplanned-end marker and its redone steps drawn
# apart.  -o, --reference and a metrics.jsonl given itself work.  Each bad
# input gets its exit status (1: bad data or files, 2: usage) and a message
# naming the path, and leaves an earlier output file as it was, with no
# temporary file left beside it; a torn last line is skipped silently, a
# garbage line elsewhere with a warning.
: "${FTRAIN_TIMEOUT:=60}"
. "$(dirname "$0")/../lib.sh"
need_mpi
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PLOT=$SRC/scripts/ftrain-plot
# Debian's python3 (the command's own shebang may find another first).
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3) || skip_all "python3 not installed"

ARGS="--data line --layers 8 --global-batch 32 --micro-batch 8 --lr 0.01 --deterministic
--steps 60 --log-every 1 --ckpt-every 10"

# plot ARGS...: ftrain-plot ARGS; stdout in $T/out, stderr in $T/err, rc.
plot() { run "$PY" "$PLOT" "$@"; }

# svginfo FILE: what the SVG shows, one line each ("bad XML: ..." when it
# does not parse): the stop markers' steps, the unplanned-end markers'
# steps, the segment labels (WORLD:TEXT), the loss polylines (count and
# points), the reference polylines (the same).
svginfo() {
    "$PY" - "$1" <<'EOF'
import sys
import xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (ET.ParseError, OSError) as e:
    print("bad XML: %s" % e)
    sys.exit(0)
ns = "{http://www.w3.org/2000/svg}"
def cls(tag, c):
    return [e for e in root.iter(ns + tag) if e.get("class") == c]
def pts(c):
    p = cls("polyline", c)
    return "%d %d" % (len(p), sum(len(e.get("points").split()) for e in p))
print("stops", " ".join(e.get("data-step") for e in cls("g", "stop")))
print("failures", " ".join(e.get("data-step") for e in cls("g", "failure")))
print("segments", " ".join("%s:%s" % (e.get("data-world"), e.text.replace(" ", "_"))
                           for e in cls("text", "segment")))
print("loss", pts("loss"))
print("reference", pts("reference"))
EOF
}
# field NAME FILE: the line of svginfo's output for FILE that starts NAME.
field() { svginfo "$2" | sed -n "s/^$1 *//p"; }
# steps FILE: the step lines of a metrics.jsonl.
steps() { grep -c '"loss"' "$1"; }
# events NAME FILE: the steps of FILE's NAME events.
events() { grep "\"event\":\"$1\"" "$2" | sed 's/.*"step":\([0-9]*\).*/\1/' | tr '\n' ' ' | sed 's/ $//'; }

# ---- a run stopped twice, resumed on other world sizes ----------------------------
R=$T/run
# stop_after N OUT: SIGUSR1 to rank 1 of the background run once OUT has N
# progress lines; RC gets the run's exit status.
stop_after() {
    wait_for 30 progress_ge "$2" "$1" && kill -USR1 "$(rank_pid "$2" 1)"
    wait "$MPI_PID"
    RC=$?
    MPI_PID=
}
mpi_bg 2 $ARGS --step-delay-ms 30 --run-dir "$R" >"$T/a.out" 2>"$T/a.err"
stop_after 5 "$T/a.out"
is "$RC" 75 "2 ranks, SIGUSR1 to rank 1: stopped (exit 75)" || why "$(tail -n 5 "$T/a.err")"
mpi_bg 3 $ARGS --step-delay-ms 30 --run-dir "$R" >"$T/b.out" 2>"$T/b.err"
stop_after 5 "$T/b.out"
is "$RC" 75 "resumed on 3 ranks, SIGUSR1 to rank 1: stopped again (exit 75)" || why "$(tail -n 5 "$T/b.err")"
timeout -k 5 "$FTRAIN_TIMEOUT" "$FTRAIN" --device cpu $ARGS --run-dir "$R" --quiet >"$T/c.out" 2>"$T/c.err"
is "$?" 0 "resumed on 1 rank to the end (exit 0)" || why "$(tail -n 5 "$T/c.err")"
M=$R/metrics.jsonl
stops=$(events stop "$M")
nsteps=$(steps "$M")
worlds=$(grep '"event":"start"' "$M" | sed 's/.*"world_size":\([0-9]*\).*/\1/' | tr '\n' ' ')
is "$(echo "$stops" | wc -w | tr -d ' ') $worlds" "2 2 3 1 " "metrics.jsonl: 2 stop events, launches of 2, 3 and 1 ranks"

plot "$R"
ok "$([ "$rc" -eq 0 ] && [ -s "$R/loss.svg" ] && [ ! -s "$T/err" ]; echo $?)" \
    "ftrain-plot RUN_DIR: exit 0, RUN_DIR/loss.svg written, nothing on stderr (exit $rc)" || why "$(cat "$T/err")"
like "$(cat "$T/out")" "^ftrain-plot: wrote $R/loss.svg \($nsteps steps, 2 stops, 0 unplanned ends\)\$" \
    "  it says what it wrote"
svginfo "$R/loss.svg" >"$T/info"
ok "$(! grep -q '^bad XML' "$T/info"; echo $?)" "  the SVG is well-formed XML (xml.etree parses it)" || why "$(cat "$T/info")"
is "$(sed -n 's/^stops //p' "$T/info")" "$stops" "  one stop marker per stop event, at its step ($stops)"
is "$(sed -n 's/^segments //p' "$T/info")" "2:2_ranks 3:3_ranks 1:1_rank" \
    "  one segment label per start event, with its world size"
is "$(sed -n 's/^loss //p' "$T/info")" "1 $nsteps" "  one loss polyline with a point per step line ($nsteps)"
is "$(sed -n 's/^failures //p' "$T/info")" "" "  no unplanned-end marker: every launch logged its end"

# -o, and the metrics file given itself.
mkdir "$T/o"
cp "$R/loss.svg" "$T/first.svg"
plot "$R" -o "$T/o/x.svg"
ok "$([ "$rc" -eq 0 ] && cmp -s "$T/o/x.svg" "$T/first.svg"; echo $?)" "-o OUT.svg: the same picture there (exit $rc)" ||
    why "$(cat "$T/err")"
cp "$M" "$T/o/m.jsonl"
plot "$T/o/m.jsonl"
ok "$([ "$rc" -eq 0 ] && [ "$(field stops "$T/o/loss.svg")" = "$stops" ]; echo $?)" \
    "a metrics.jsonl given itself: plotted to loss.svg beside it (exit $rc)" || why "$(cat "$T/err")"

# --reference: an uninterrupted world of one.
timeout -k 5 "$FTRAIN_TIMEOUT" "$FTRAIN" --device cpu $ARGS --run-dir "$T/ref" --quiet >"$T/ref.out" 2>&1
is "$?" 0 "the reference run, uninterrupted on 1 rank (exit 0)" || why "$(tail -n 5 "$T/ref.out")"
plot "$R" -o "$T/o/ref.svg" --reference "$T/ref"
ok "$([ "$rc" -eq 0 ] && [ "$(field reference "$T/o/ref.svg")" = "1 $(steps "$T/ref/metrics.jsonl")" ] &&
      [ "$(field loss "$T/o/ref.svg")" = "1 $nsteps" ]; echo $?)" \
    "--reference RUN_DIR2: its loss drawn too, a point per step line (exit $rc)" ||
    why "$(cat "$T/err")" "$(svginfo "$T/o/ref.svg")"
like "$(grep -c 'wide grey: the reference run' "$T/o/ref.svg")" '^1$' "  and named in the legend"

# ---- an unplanned end: a world of one killed, relaunched ----------------------------
F=$T/fail
FARGS="--device cpu --data line --layers 8 --global-batch 32 --micro-batch 8 --deterministic --steps 20 --log-every 1 --ckpt-every 5"
timeout -k 5 "$FTRAIN_TIMEOUT" "$FTRAIN" $FARGS --run-dir "$F" --fault kill@12 >"$T/f1.out" 2>&1
timeout -k 5 "$FTRAIN_TIMEOUT" "$FTRAIN" $FARGS --run-dir "$F" --quiet >"$T/f2.out" 2>&1
is "$?" 0 "a world of one killed after step 12 (--fault), relaunched to the end" || why "$(tail -n 5 "$T/f2.out")"
plot "$F"
ok "$([ "$rc" -eq 0 ] && [ "$(field failures "$F/loss.svg")" = 12 ] && [ "$(field stops "$F/loss.svg")" = "" ]; echo $?)" \
    "  one unplanned-end marker, after step 12, and no stop marker (exit $rc)" || why "$(svginfo "$F/loss.svg")"
is "$(field loss "$F/loss.svg")" "2 $(steps "$F/metrics.jsonl")" "  the redone steps drawn as a second polyline"

# ---- bad input: a message, the exit status, the earlier output untouched ---------
echo previous >"$T/keep.svg"
cp "$T/keep.svg" "$T/keep.orig"
# kept: $T/keep.svg is as it was, and no temporary file is left in $T.
kept() {
    cmp -s "$T/keep.svg" "$T/keep.orig" && [ -z "$(ls -A "$T" | grep '^\.keep\.svg\.')" ]
}
# refused STATUS REGEX NAME ARGS...: ftrain-plot ARGS -o $T/keep.svg exits
# STATUS with REGEX on stderr and leaves keep.svg.
refused() {
    _st=$1 _re=$2 _name=$3
    shift 3
    plot "$@" -o "$T/keep.svg"
    ok "$([ "$rc" -eq "$_st" ] && grep -Eq -- "$_re" "$T/err" && kept; echo $?)" \
        "$_name: exit $_st, says so, the earlier output untouched (exit $rc)" || why "$(cat "$T/err")"
}
refused 1 "^ftrain-plot: '$T/nope': no such file or directory\$" "no such run directory" "$T/nope"
mkdir "$T/empty"
refused 1 "^ftrain-plot: '$T/empty' holds no metrics.jsonl: not a run directory" \
    "a directory without metrics.jsonl" "$T/empty"
mkdir "$T/nosteps"
grep '"event"' "$M" >"$T/nosteps/metrics.jsonl"
echo previous >"$T/nosteps/loss.svg"
plot "$T/nosteps"
ok "$([ "$rc" -eq 1 ] && grep -q "^ftrain-plot: '$T/nosteps/metrics.jsonl' has no step lines" "$T/err" &&
      [ "$(cat "$T/nosteps/loss.svg")" = previous ] && [ "$(ls -A "$T/nosteps" | wc -l)" -eq 2 ]; echo $?)" \
    "metrics.jsonl with events only, no step line: exit 1, its default loss.svg untouched (exit $rc)" ||
    why "$(cat "$T/err")"
mkdir "$T/garbage"
printf 'not json\n\001\002\377\n[1, 2]\n{"no":"step"}\n' >"$T/garbage/metrics.jsonl"
refused 1 "^ftrain-plot: '$T/garbage/metrics.jsonl' is not a metrics file: none of its 4 lines is an ftrain JSON line" \
    "a metrics.jsonl that is all garbage" "$T/garbage"
: >"$T/empty.jsonl"
refused 1 "^ftrain-plot: '$T/empty.jsonl' is empty" "an empty metrics file" "$T/empty.jsonl"

# A torn last line (a crash in mid-write) is skipped without a word; a
# garbage line elsewhere with a warning naming it.
mkdir "$T/torn"
cp "$M" "$T/torn/metrics.jsonl"
printf '{"step":61,"epoch":2,"lo' >>"$T/torn/metrics.jsonl"
plot "$T/torn"
ok "$([ "$rc" -eq 0 ] && [ ! -s "$T/err" ] && [ "$(field loss "$T/torn/loss.svg")" = "1 $nsteps" ]; echo $?)" \
    "a torn last line: skipped silently, every whole step drawn (exit $rc)" || why "$(cat "$T/err")"
mkdir "$T/mid"
{ head -n 10 "$M"; echo 'garbage {"step":'; tail -n +11 "$M"; } >"$T/mid/metrics.jsonl"
plot "$T/mid"
ok "$([ "$rc" -eq 0 ] && grep -q "^ftrain-plot: warning: '$T/mid/metrics.jsonl': skipped 1 line that is not one of ftrain's JSON lines (line 11)\$" "$T/err" &&
      [ "$(field loss "$T/mid/loss.svg")" = "1 $nsteps" ]; echo $?)" \
    "a garbage line mid-file: skipped with a warning naming it, the rest drawn (exit $rc)" || why "$(cat "$T/err")"

# The output.
plot "$R" -o "$T/no/dir/x.svg"
ok "$([ "$rc" -eq 1 ] && grep -q "^ftrain-plot: cannot write '$T/no/dir/x.svg': the directory '$T/no/dir' does not exist\$" "$T/err" &&
      [ ! -e "$T/no" ]; echo $?)" "an output directory that does not exist: exit 1, says so, makes none (exit $rc)" ||
    why "$(cat "$T/err")"
mkdir "$T/ro"
echo previous >"$T/ro/loss.svg"
chmod 555 "$T/ro"
if ! touch "$T/ro/probe" 2>/dev/null; then
    plot "$R" -o "$T/ro/loss.svg"
    ok "$([ "$rc" -eq 1 ] && grep -q "^ftrain-plot: cannot write '$T/ro/loss.svg': Permission denied" "$T/err" &&
          [ "$(cat "$T/ro/loss.svg")" = previous ] && [ "$(ls -A "$T/ro")" = loss.svg ]; echo $?)" \
        "an output directory that is not writable: exit 1, says so, its loss.svg untouched (exit $rc)" ||
        why "$(cat "$T/err")"
elif [ -d /sys ]; then
    # root writes into a mode 555 directory; sysfs takes no new file.
    rm -f "$T/ro/probe"
    plot "$R" -o /sys/ftrain-plot-test.svg
    ok "$([ "$rc" -eq 1 ] && grep -q "^ftrain-plot: cannot write '/sys/ftrain-plot-test.svg': Permission denied" "$T/err"; echo $?)" \
        "an output directory that is not writable (/sys, as root): exit 1, says so (exit $rc)" || why "$(cat "$T/err")"
else
    skip "an output directory that is not writable" "no directory here refuses a new file"
fi
chmod 755 "$T/ro"
mkdir "$T/isdir.svg"
plot "$R" -o "$T/isdir.svg"
ok "$([ "$rc" -eq 1 ] && grep -q "^ftrain-plot: cannot write '$T/isdir.svg': it is a directory\$" "$T/err" &&
      [ -z "$(ls -A "$T/isdir.svg")" ]; echo $?)" "an output that is a directory: exit 1, says so, nothing written (exit $rc)" ||
    why "$(cat "$T/err")"

# --reference.
refused 1 "^ftrain-plot: --reference '$T/nope': no such file or directory\$" "--reference that does not exist" \
    "$R" --reference "$T/nope"
refused 1 "^ftrain-plot: --reference '$T/empty' holds no metrics.jsonl" "--reference without metrics.jsonl" \
    "$R" --reference "$T/empty"
refused 1 "^ftrain-plot: --reference '$T/nosteps/metrics.jsonl' has no step lines" "--reference without step lines" \
    "$R" --reference "$T/nosteps"

# Usage errors: exit 2, the usage on stderr.
refused 2 "^ftrain-plot: missing RUN_DIR" "no RUN_DIR"
refused 2 "^ftrain-plot: unknown option '--bogus'\$" "an unknown option" "$R" --bogus
refused 2 "^ftrain-plot: -o/--output given twice\$" "-o twice" "$R" -o "$T/other.svg"
refused 2 "^ftrain-plot: one run directory only, not '$R' and '$T/ref'\$" "two run directories" "$R" "$T/ref"
plot "$R" --reference
ok "$([ "$rc" -eq 2 ] && grep -q "^ftrain-plot: option '--reference' needs a value\$" "$T/err" &&
      grep -q '^usage: ftrain-plot RUN_DIR' "$T/err" && [ ! -s "$T/out" ]; echo $?)" \
    "--reference without its value: exit 2, the usage on stderr (exit $rc)" || why "$(cat "$T/err")"
cp "$M" "$T/m.orig"
plot "$R" -o "$M"
ok "$([ "$rc" -eq 2 ] && grep -q "^ftrain-plot: the output '$M' is the run's metrics file" "$T/err" &&
      cmp -s "$M" "$T/m.orig"; echo $?)" "-o the run's own metrics.jsonl: refused (exit $rc), the metrics untouched" ||
    why "$(cat "$T/err")"
plot --help
ok "$([ "$rc" -eq 0 ] && grep -q '^usage: ftrain-plot RUN_DIR \[-o OUT.svg\] \[--reference RUN_DIR2\]$' "$T/out" &&
      grep -q '^exit status:' "$T/out" && [ ! -s "$T/err" ]; echo $?)" "--help: the usage and exit statuses on stdout, exit 0"

done_testing

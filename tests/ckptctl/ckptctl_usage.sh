#!/bin/sh
# ckptctl_usage.sh - TAP tests of `ckptctl verify` and `ckptctl import` given
# bad usage: no arguments, too many, an unknown option or one of another
# command, a step that is not a number, a missing path, a file where a
# directory is expected (and a directory where a file is), an import whose
# checkpoint already exists.  Each is refused with the exit code of
# docs/ckptctl.md's table (2 usage, 1 a bad archive, 3 anything else),
# nothing on stdout and one message on stderr that names the command and
# the problem; and the good state before it is untouched: the existing
# checkpoint root is the same byte for byte, and no directory is created.
#
# Reads $BUILD (default build) for build/ckptctl and the fixture maker
# build/tests/tools/ckpt_mkfixture.
. "$(dirname "$0")/../lib.sh"

C=$BUILD/ckptctl
MK=$BUILD/tests/tools/ckpt_mkfixture
[ -x "$C" ] && [ -x "$MK" ] || skip_all "$C or $MK not built"

plan 80

# snapshot DIR: every entry under DIR with its type, mode and link
# target, then the size and checksum of every file: equal snapshots are
# the same tree byte for byte.
snapshot() {
    (cd "$1" && find . -printf '%y %m %p -> %l\n' | LC_ALL=C sort &&
        find . -type f -exec cksum {} + | LC_ALL=C sort)
}
# shown: what the last run printed, for a failure's details.
shown() { why "rc: $rc" "stdout: $(cat "$T/out")" "stderr: $(cat "$T/err")"; }

# refused CODE REGEX NAME ARGS...: `ckptctl ARGS` exits CODE with nothing on
# stdout and a stderr whose first line is "ckptctl: <command>: ..." matching
# REGEX (grep -E).  Two checks.
refused() {
    _code=$1 _re=$2 _name=$3
    shift 3
    run "$C" "$@"
    is "$rc" "$_code" "$_name: exit $_code" || shown
    _first=$(head -n 1 "$T/err")
    ok "$([ ! -s "$T/out" ] && printf '%s\n' "$_first" | grep -Eq -- "^ckptctl: $1: $_re"
        echo $?)" "  nothing on stdout; stderr: $_first" || shown
}
# usage CMD REGEX NAME ARGS...: a usage error (exit 2) that also points to
# the command's help.  Three checks.
usage() {
    _cmd=$1 _ure=$2 _uname=$3
    shift 3
    refused 2 "$_ure" "$_uname" "$@"
    grep -qx "try 'ckptctl help $_cmd'" "$T/err"
    ok $? "  and points to 'ckptctl help $_cmd'" || shown
}

# The good state: a root with step 10 (LATEST names it), and archives of a
# step 10 with other bytes (a fixture of another seed) and of a step 20.
R=$T/root
"$MK" "$R" 10 --mb 0.02 --seed 1 >/dev/null &&
    "$MK" "$T/other" 10 --mb 0.02 --seed 2 >/dev/null &&
    "$MK" "$T/other" 20 --mb 0.02 --seed 3 >/dev/null &&
    "$C" export "$T/other" 10 "$T/s10.tar" >/dev/null &&
    "$C" export "$T/other" 20 "$T/s20.tar" >/dev/null
ok $? "fixtures: a root with step 10, archives of another step 10 and of a step 20"
ok "$(cmp -s "$R/step-00000010/shard-0.ftsh" "$T/other/step-00000010/shard-0.ftsh"
    [ $? -eq 1 ]; echo $?)" "the archived step 10 holds other bytes than the root's"
before=$(snapshot "$R")

# ---- verify ------------------------------------------------------------------
# The root and its checkpoint verify: every refusal below is the usage's.
run "$C" verify "$R" 10
is "$rc" 0 "control: verify ROOT 10 of the good root exits 0" || shown

usage verify "missing argument \(usage: ckptctl verify " "verify with no arguments" verify
usage verify "missing argument" "verify --json with no path" verify --json
usage verify "too many arguments \(usage: ckptctl verify " "verify ROOT 10 extra" \
    verify "$R" 10 extra
usage verify "unknown option '--bogus'" "verify with an unknown option" verify --bogus "$R"
usage verify "option '--keep' does not apply to 'verify'" "verify with prune's --keep" \
    verify --keep 2 "$R"
usage verify "'abc' is not a step number" "verify ROOT abc" verify "$R" abc
usage verify "'99999999999999999999' is not a step number" \
    "verify ROOT 99999999999999999999 (past any step)" verify "$R" 99999999999999999999
refused 3 "'$T/nosuch': no such checkpoint" "verify of a missing path" verify "$T/nosuch"
refused 3 "'$R/step-00000099': no such checkpoint" "verify ROOT 99 (no such step)" \
    verify "$R" 99
usage verify "'$T/s10.tar' is a file, not a checkpoint directory" \
    "verify of a file (an archive) for a checkpoint" verify "$T/s10.tar"
usage verify "'$R/step-00000010/manifest.json' is a file" "verify of a file inside a checkpoint" \
    verify "$R/step-00000010/manifest.json"
usage verify "'9223372036854775808' is not a step number \(0 to 9223372036854775807\)" \
    "verify ROOT 2^63 (past the largest step, as --step says)" verify "$R" 9223372036854775808
usage verify "argument 1 is empty" "verify '' (an unset variable)" verify ""
mkdir "$T/empty"
refused 3 "'$T/empty': no checkpoints in this directory" "verify of a directory without checkpoints" \
    verify "$T/empty"

# ---- import ------------------------------------------------------------------
usage import "missing argument \(usage: ckptctl import FILE DIR\)" "import with no arguments" import
usage import "missing argument" "import FILE without DIR" import "$T/s20.tar"
usage import "too many arguments" "import FILE DIR extra" import "$T/s20.tar" "$T/new" extra
usage import "unknown option '--bogus'" "import with an unknown option" \
    import --bogus "$T/s20.tar" "$T/new"
usage import "option '--force' does not apply to 'import'" "import with export's --force" \
    import --force "$T/s20.tar" "$T/new"
usage import "argument 2 is empty" "import FILE '' (an unset variable for DIR)" \
    import "$T/s20.tar" ""
usage import "argument 1 is empty" "import '' DIR (an unset variable for FILE)" import "" "$T/new"
refused 3 "'$T/nosuch.tar': cannot open archive '$T/nosuch.tar': No such file" \
    "import of a missing archive" import "$T/nosuch.tar" "$T/new"
refused 1 "'$T/empty': not a readable tar archive" "import of a directory for the archive" \
    import "$T/empty" "$T/new"
ok "$([ ! -e "$T/new" ]; echo $?)" "none of the refused imports above created DIR"

echo "a file, not a root" >"$T/afile"
sum=$(cksum <"$T/afile")
refused 3 "'$T/afile': not a directory" "import into a file" import "$T/s20.tar" "$T/afile"
is "$(cksum <"$T/afile")" "$sum" "  the file is unchanged"

refused 3 "'$T/s10.tar': checkpoint 'step-00000010' already exists in '$R'" \
    "import of a step the root already has" import "$T/s10.tar" "$R"
refused 1 "'$T/afile': not a readable tar archive" "import of a file that is not a tar into the root" \
    import "$T/afile" "$R"
refused 3 "'$R/step-00000010': is a checkpoint, not a root" "import into a checkpoint" \
    import "$T/s20.tar" "$R/step-00000010"
is "$(snapshot "$R")" "$before" \
    "after the refused imports the root is the same byte for byte (no temp dir, LATEST as it was)" ||
    why "$(snapshot "$R")"

# The archives themselves are good: the same import into a fresh root works.
run "$C" import "$T/s10.tar" "$T/fresh"
is "$rc" 0 "control: the refused step-10 archive imports into a fresh root" || shown
run "$C" verify "$R"
is "$rc" 0 "control: the root still verifies after all of it" || shown

done_testing
